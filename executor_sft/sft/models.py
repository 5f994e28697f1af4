"""Model + tokenizer loading, with offline aliases for the embedded default and tests."""

from __future__ import annotations

import logging

from executor_sft.llm.gqa_attention import GROUPED_SDPA, register_grouped_sdpa
from executor_sft.llm.offline import is_offline, load_offline
from executor_sft.sft.varlen import VARLEN_ATTENTION, register_varlen_attention

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "offline:smollm2"


def load_tokenizer_and_model(model_args, training_args):
    """Returns (tokenizer, model_or_id). Hub/local ids come back as strings: the trainer loads
    them itself with `model_init_kwargs` (so DeepSpeed ZeRO-3 can shard at load time)."""
    name = model_args.model_name_or_path or DEFAULT_MODEL
    if model_args.attn_implementation == VARLEN_ATTENTION:
        register_varlen_attention()
    elif model_args.attn_implementation == GROUPED_SDPA:
        register_grouped_sdpa()
    if is_offline(name):
        dtype = model_args.dtype if model_args.dtype not in (None, "auto") else "float32"
        model, tokenizer = load_offline(name, dtype)
        if model_args.attn_implementation:
            model.set_attn_implementation(model_args.attn_implementation)
        return tokenizer, model

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        name, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
    )
    init = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype or "auto",
    )
    training_args.model_init_kwargs = {**init, **(training_args.model_init_kwargs or {})}
    return tokenizer, name


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX). Where it does, bf16
    autocast runs an SFT step's matmuls at ~2.8x fp32's rate (bench/results/cpu_fast_path.md);
    where it does not, oneDNN emulates bf16 and autocast is slower than fp32."""
    import torch

    caps = torch.cpu.get_capabilities()
    return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))
