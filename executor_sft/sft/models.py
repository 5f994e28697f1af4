"""Model + tokenizer loading, with offline aliases for the embedded default and tests."""

from __future__ import annotations

import logging

from executor_sft.errors import ConfigError
from executor_sft.llm.gqa_attention import GROUPED_SDPA, register_grouped_sdpa
from executor_sft.llm.offline import is_offline, load_offline, offline_model
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


def check_model_options(model_args, training_args, trainable_layers: int | None) -> None:
    """Options the model must match, checked before it loads: the attention kernel's name, and
    `trainable_layers` against the model's decoder layers (read from its config, not its weights)."""
    name = model_args.model_name_or_path or DEFAULT_MODEL
    if (kernel := model_args.attn_implementation) and (problem := attention_problem(kernel)):
        raise ConfigError(problem)
    if trainable_layers is None:
        return
    total = decoder_layer_count(name, model_args, training_args)
    if total is not None and trainable_layers > total:
        raise ConfigError(
            f"--trainable_layers {trainable_layers}: {name} has {total} decoder layers; give 1 to {total}"
        )


def attention_problem(name: str) -> str | None:
    """None for an attention kernel transformers (or this package) knows, or a Hub kernel
    (`org/name`); else the line naming the known ones."""
    import difflib

    from transformers import AttentionInterface

    known = {"eager", VARLEN_ATTENTION, GROUPED_SDPA, *AttentionInterface._global_mapping}
    if name in known or "/" in name:
        return None
    close = difflib.get_close_matches(name, sorted(known), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(sorted(known))}"
    return f"--attn_implementation {name}: no such attention kernel; {hint}"


def decoder_layer_count(name: str, model_args, training_args) -> int | None:
    """The model's decoder layers from its config (None when the config cannot tell: the loader
    then says what is wrong with the model)."""
    if is_offline(name):
        return offline_model(name).layers
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            name, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
        )
    except (OSError, ValueError):
        return None
    return getattr(config.get_text_config(), "num_hidden_layers", None)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX). Where it does, bf16
    autocast runs an SFT step's matmuls at ~2.8x fp32's rate (bench/results/cpu_fast_path.md);
    where it does not, oneDNN emulates bf16 and autocast is slower than fp32."""
    import torch

    caps = torch.cpu.get_capabilities()
    return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))
