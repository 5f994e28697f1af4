"""Grouped SDPA: the attention of transformers' `sdpa` without copying key/value heads."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from executor_sft.llm import TransformersChatModel
from executor_sft.llm.gqa_attention import GROUPED_SDPA, grouped_sdpa_forward, use_grouped_sdpa
from tests.support import tiny_qwen3


class _Heads(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def _padded_causal_mask(batch: int, q_len: int, kv_len: int) -> torch.Tensor:
    """A left-padded batch's boolean mask: row r has r padding positions; the new q_len positions
    are causal among themselves."""
    mask = torch.ones(batch, 1, q_len, kv_len, dtype=torch.bool)
    for r in range(batch):
        mask[r, :, :, :r] = False
    mask[:, :, :, kv_len - q_len :] &= torch.tril(torch.ones(q_len, q_len, dtype=torch.bool))
    return mask


@pytest.mark.parametrize("q_len", [1, 5])
def test_equals_sdpa_with_copied_heads_under_a_padding_mask(q_len):
    g = torch.Generator().manual_seed(q_len)
    batch, kv_heads, groups, dim, kv_len = 4, 2, 3, 8, 11
    query = torch.randn(batch, kv_heads * groups, q_len, dim, generator=g)
    key = torch.randn(batch, kv_heads, kv_len, dim, generator=g)
    value = torch.randn(batch, kv_heads, kv_len, dim, generator=g)
    mask = _padded_causal_mask(batch, q_len, kv_len)
    want, _ = sdpa_attention_forward(_Heads(), query, key, value, mask, scaling=0.3)
    got, _ = grouped_sdpa_forward(_Heads(), query, key, value, mask, scaling=0.3)
    assert got.shape == want.shape == (batch, q_len, kv_heads * groups, dim)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_a_left_padded_batch_generates_the_same_tokens_and_logits(smollm2):
    """SmolLM2-135M (9 query heads over 3 key/value heads): greedy tokens equal, logits to 1e-4."""
    model, tokenizer = smollm2
    texts = ["The capital of France is", "Write one word:", "Search engines rank passages by"]
    batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    assert (batch["attention_mask"] == 0).any()  # the rows are padded, so a mask is passed

    def generate():
        with torch.inference_mode():
            return model.generate(
                **batch,
                max_new_tokens=8,
                do_sample=False,
                return_dict_in_generate=True,
                output_logits=True,
                pad_token_id=tokenizer.pad_token_id,
            )

    shared = model.config._attn_implementation  # a chat backend built on this fixture switched it
    try:
        model.set_attn_implementation("sdpa")
        want = generate()
        assert use_grouped_sdpa(model)
        got = generate()
    finally:
        model.set_attn_implementation(shared)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.logits, want.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_the_chat_backend_uses_it_on_cpu_and_only_for_grouped_heads():
    model, tokenizer = tiny_qwen3()  # 4 query heads over 2 key/value heads
    TransformersChatModel(model, tokenizer).close()
    assert model.config._attn_implementation == GROUPED_SDPA
    model, _ = tiny_qwen3()
    model.config.num_key_value_heads = model.config.num_attention_heads
    assert not use_grouped_sdpa(model)
    assert model.config._attn_implementation == "sdpa"


def test_the_recipes_load_it_by_name(tmp_path):
    """`attn_implementation: grouped_sdpa` in an SFT config (an offline alias) and in a post-training
    one (a checkpoint folder, which TRL loads itself from `model_init_kwargs`)."""
    from transformers import AutoModelForCausalLM
    from trl import ModelConfig, SFTConfig

    from executor_sft.grpo.policy import load_policy
    from executor_sft.sft.models import load_tokenizer_and_model

    tokenizer, model = load_tokenizer_and_model(
        ModelConfig(model_name_or_path="offline:tiny-qwen3", attn_implementation=GROUPED_SDPA),
        SFTConfig(output_dir=str(tmp_path / "sft"), use_cpu=True),
    )
    assert model.config._attn_implementation == GROUPED_SDPA
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")  # a whole checkpoint folder, as the preflight asks
    name, _ = load_policy(
        ModelConfig(model_name_or_path=str(tmp_path / "ckpt"), attn_implementation=GROUPED_SDPA)
    )
    loaded = AutoModelForCausalLM.from_pretrained(name, attn_implementation=GROUPED_SDPA)
    assert loaded.config._attn_implementation == GROUPED_SDPA
