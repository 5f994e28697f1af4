"""Model + tokenizer loading, with offline aliases for the embedded default and tests."""

from __future__ import annotations

import logging

from executor_sft.sft.varlen import VARLEN_ATTENTION, register_varlen_attention

logger = logging.getLogger(__name__)

# Offline aliases: no model hub needed (see executor_sft.testing).
OFFLINE_ALIASES = ("offline:smollm2", "offline:tiny-qwen3")
DEFAULT_MODEL = "offline:smollm2"


def _torch_dtype(dtype: str | None):
    import torch

    if dtype in (None, "auto"):
        return None
    return getattr(torch, dtype)


def load_tokenizer_and_model(model_args, training_args):
    """Returns (tokenizer, model_or_id). Hub/local ids come back as strings: the trainer loads
    them itself with `model_init_kwargs` (so DeepSpeed ZeRO-3 can shard at load time)."""
    name = model_args.model_name_or_path or DEFAULT_MODEL
    if model_args.attn_implementation == VARLEN_ATTENTION:
        register_varlen_attention()
    if name.startswith("offline:"):
        from executor_sft import testing

        if name == "offline:smollm2":
            model, tokenizer = testing.smollm2_instruct(
                dtype=model_args.dtype if _torch_dtype(model_args.dtype) else "float32"
            )
        elif name == "offline:tiny-qwen3":
            model, tokenizer = testing.tiny_qwen3()
            if (dt := _torch_dtype(model_args.dtype)) is not None:
                model = model.to(dt)
        else:
            raise ValueError(f"unknown offline model alias {name!r}; known: {', '.join(OFFLINE_ALIASES)}")
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
