"""SDPA attention that keeps grouped-query heads grouped when a padding mask is present.

transformers' `sdpa` attention copies every key/value head `num_key_value_groups` times
(`repeat_kv`) whenever an attention mask is passed, which a left-padded batch always has: on a
CPU the copy, not the attention, is the cost of a decode step (SmolLM2-135M, 24 rows, 800 cached
tokens: 30 layers x 2 copies of 88 MB per token). This implementation folds the query heads
that share a key/value head into the query-length axis instead (exactly the same products and
softmaxes, no copy of the cache), and hands everything else to transformers' `sdpa`.

`use_grouped_sdpa(model)` switches a loaded model to it, and `attn_implementation: grouped_sdpa`
selects it in the SFT, distillation and GRPO recipes (their CPU configs do); the masks are
transformers' own (`sdpa_mask`). The transformers chat backend switches on CPU; GPU configs keep
`sdpa` (its GPU kernels take grouped heads without a mask) and vLLM has its own kernels.
"""

from __future__ import annotations

from typing import Any

GROUPED_SDPA = "grouped_sdpa"
"""The `attn_implementation` name this module registers with transformers."""


def grouped_sdpa_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """`sdpa_attention_forward`'s contract: tensors [batch, heads, len, dim] in, [batch, len,
    heads, dim] out."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    foldable = (
        groups > 1
        and attention_mask is not None
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == 1
        and dropout == 0.0
        and not kwargs.get("output_attentions", False)
    )
    if not foldable:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    # Head h reads key/value head h // groups (repeat_kv's order), so the query heads of one
    # group are adjacent: view them as `groups` x q_len queries of that key/value head.
    folded = query.reshape(batch, kv_heads, groups * q_len, dim)
    mask = attention_mask.expand(batch, 1, q_len, attention_mask.shape[-1])
    mask = (
        mask.unsqueeze(2)
        .expand(batch, 1, groups, q_len, mask.shape[-1])
        .reshape(batch, 1, groups * q_len, -1)
    )
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling)
    # [batch, kv_heads, groups * q_len, dim] -> [batch, q_len, heads, dim], as sdpa returns it
    out = out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous()
    return out, None


def register_grouped_sdpa() -> str:
    """Register the attention and its mask (transformers' `sdpa_mask`) with transformers, so that
    `attn_implementation="grouped_sdpa"` loads; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)
    return GROUPED_SDPA


def use_grouped_sdpa(model: Any) -> bool:
    """Switch a loaded model from `sdpa` to `grouped_sdpa` when it has grouped key/value heads;
    whether it did."""
    register_grouped_sdpa()
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None)
    if config._attn_implementation != "sdpa" or not heads or not kv_heads or heads == kv_heads:
        return False
    model.set_attn_implementation(GROUPED_SDPA)
    return model.config._attn_implementation == GROUPED_SDPA


__all__ = ["GROUPED_SDPA", "grouped_sdpa_forward", "register_grouped_sdpa", "use_grouped_sdpa"]
