"""Packed-sequence attention without a mask: `attn_implementation="executor_varlen"`.

With packing (padding-free batches of shape (1, total_tokens) and per-sequence
`position_ids`), SDPA needs a block-diagonal mask and falls back to slow kernels. This
attention calls `torch.nn.attention.varlen.varlen_attn` (flash attention over cumulative
sequence offsets, causal) on CUDA, and a per-sequence SDPA loop elsewhere (same result,
for CPU tests). Sequence boundaries come from the collator's `cu_seq_lens_q` (TRL's
padding-free collator provides it) or from `position_ids`, so it also isolates sequences
when a KV cache is built. Batches with padding are refused: use packing or padding_free.
"""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F

VARLEN_ATTENTION = "executor_varlen"

try:  # torch >= 2.10
    from torch.nn.attention.varlen import varlen_attn as _varlen_attn

    _VARLEN_PARAMS = set(inspect.signature(_varlen_attn).parameters)
except ImportError:  # pragma: no cover - older torch
    _varlen_attn, _VARLEN_PARAMS = None, set()


def cu_seqlens_from_position_ids(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sequence starts are where position_ids restart at 0."""
    pos = position_ids.reshape(-1)
    starts = (pos == 0).nonzero().flatten()
    if starts.numel() == 0 or starts[0] != 0:
        starts = torch.cat([starts.new_zeros(1), starts])
    cu = torch.cat([starts, starts.new_tensor([pos.numel()])]).to(torch.int32)
    return cu, int(cu.diff().max())


def varlen_call_options(params: set[str], scaling: float | None, d: int, hq: int, hkv: int):
    """Keyword arguments for the installed torch's `varlen_attn` (its signature changed across
    releases): returns (kwargs, factor to pre-scale q by, kv head repeat)."""
    extra: dict = {}
    q_mult, groups = 1.0, 1
    if "window_size" in params:
        extra["window_size"] = (-1, 0)
    elif "is_causal" in params:
        extra["is_causal"] = True
    else:
        raise RuntimeError("this torch's varlen_attn has neither window_size nor is_causal")
    if scaling is not None:
        if "scale" in params:
            extra["scale"] = scaling
        else:
            q_mult = scaling * math.sqrt(d)
    if hq != hkv:
        if "enable_gqa" in params:
            extra["enable_gqa"] = True
        else:
            groups = hq // hkv
    return extra, q_mult, groups


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def varlen_attention_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function; query/key/value are (B, H, S, D)."""
    b, hq, s, d = query.shape
    if b != 1:
        raise ValueError(f"{VARLEN_ATTENTION} attention needs padding-free batches (batch 1), got batch {b}")
    cu, max_len = kwargs.get("cu_seq_lens_q"), kwargs.get("max_length_q")
    if cu is None:
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            cu, max_len = torch.tensor([0, s], dtype=torch.int32), s
        else:
            cu, max_len = cu_seqlens_from_position_ids(position_ids)
    cu = cu.to(device=query.device, dtype=torch.int32)
    hkv = key.shape[1]
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (S, H, D)
    if query.is_cuda and _varlen_attn is not None:
        dtype = q.dtype
        if dtype == torch.float32:  # flash kernels take bf16/fp16 (RoPE upcasts under autocast)
            low = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled() else torch.bfloat16
            q, k, v = q.to(low), k.to(low), v.to(low)
        extra, q_mult, groups = varlen_call_options(_VARLEN_PARAMS, scaling, d, hq, hkv)
        if abs(q_mult - 1.0) > 1e-6:
            q = q * q_mult
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = _varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, max_len, max_len, **extra)
        return out.unsqueeze(0), None
    bounds = cu.tolist()
    outs = []
    for a, e in zip(bounds[:-1], bounds[1:], strict=False):
        qi = query[:, :, a:e]
        ki, vi = (_repeat_kv(x[:, :, a:e], hq // hkv) for x in (key, value))
        outs.append(F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, scale=scaling))
    return torch.cat(outs, dim=2).transpose(1, 2), None


def _no_mask(*args, **kwargs):
    return None


def register_varlen_attention(name: str = VARLEN_ATTENTION) -> str:
    """Register the attention (and its mask function: none) with transformers; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, varlen_attention_forward)
    AttentionMaskInterface.register(name, _no_mask)
    return name
