"""The policy a post-training stage starts from: a checkpoint, a hub id or an `offline:` alias.

Stages after SFT (GRPO, distillation) run tools, so TRL parses every sampled turn with the
tokenizer's `response_template`. Checkpoints this project writes carry one; older ones, and
the offline aliases, get it here (`ensure_response_template`), so any SFT output is a start.
"""

from __future__ import annotations

from typing import Any

from executor_sft.errors import ConfigError
from executor_sft.llm.gqa_attention import GROUPED_SDPA, register_grouped_sdpa
from executor_sft.llm.offline import OFFLINE_MODELS, is_offline, load_offline
from executor_sft.llm.response_template import ensure_response_template
from executor_sft.llm.sources import check_source


def offline_dtype(dtype: str | None) -> str:
    """ModelConfig's dtype for an offline model: `auto`/unset is float32 (the models' own)."""
    return dtype if dtype not in (None, "auto") else "float32"


def load_tokenizer(name: str, revision: str | None = None, trust_remote_code: bool = False) -> Any:
    """The tokenizer of a checkpoint, hub id or offline alias, ready for tool-calling trainers."""
    if is_offline(name):
        from executor_sft.llm.offline import load_offline_tokenizer

        return ensure_response_template(load_offline_tokenizer(name))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    return ensure_response_template(tokenizer)


def load_policy(model_args: Any, trust_remote_code: bool = False) -> tuple[Any, Any]:
    """(model or model id, tokenizer) for `model_args.model_name_or_path`.

    An offline alias is loaded here (TRL cannot resolve it); a path or hub id comes back as a
    string for the trainer to load with its `model_init_kwargs` (DeepSpeed ZeRO-3 shards at load).
    """
    name = model_args.model_name_or_path
    if not name:
        raise ConfigError("model_name_or_path is required (the previous stage's output directory)")
    if model_args.attn_implementation == GROUPED_SDPA:
        register_grouped_sdpa()
    if is_offline(name):
        if OFFLINE_MODELS.get(name) is None or OFFLINE_MODELS[name].load is None:
            models = [a for a, m in OFFLINE_MODELS.items() if m.load is not None]
            raise ConfigError(
                f"model_name_or_path {name!r}: not an offline model; known: {', '.join(models)}"
            )
        model, tokenizer = load_offline(name, offline_dtype(model_args.dtype))
        if model_args.attn_implementation:
            model.set_attn_implementation(model_args.attn_implementation)
        return model, ensure_response_template(tokenizer)
    check_source(name, "model_name_or_path")
    return name, load_tokenizer(name, model_args.model_revision, trust_remote_code)


def set_model_init_kwargs(training_args: Any, model_args: Any) -> None:
    """As TRL's own scripts: ModelConfig's dtype / attention / revision go to `model_init_kwargs`
    (kept where the config sets them too)."""
    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = kwargs


def trainer_policy(
    model_args: Any, training_args: Any, model: Any = None, processing_class: Any = None
) -> tuple[Any, Any]:
    """(model or model id, tokenizer) as a post-training trainer takes them; `model` and
    `processing_class` win over what `model_args` would load.

    Without `model`, `load_policy` loads it (a path or hub id stays a string, and ModelConfig's
    dtype / attention / revision go to `model_init_kwargs` for TRL to load it with); its tokenizer is
    used unless `processing_class` is given. The tokenizer, when there is one, gets a
    `response_template`."""
    if model is None:
        model, tokenizer = load_policy(model_args, training_args.trust_remote_code)
        if isinstance(model, str):  # TRL loads it, with ModelConfig's dtype / attention / revision
            set_model_init_kwargs(training_args, model_args)
        processing_class = processing_class if processing_class is not None else tokenizer
    if processing_class is not None:
        ensure_response_template(processing_class)
    return model, processing_class
