"""Which chat template renders SFT rows for training (the tokenizer keeps its inference one)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from executor_sft.llm.offline import qwen3_executor_template

_TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
_QWEN3_MARKERS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>")
_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


@lru_cache(maxsize=1)
def qwen3_training_template() -> str:
    """Our Qwen3 training template: Qwen3's rendering plus `{% generation %}` markers."""
    return (_TEMPLATE_DIR / "qwen3_executor_training.jinja").read_text(encoding="utf-8")


def is_qwen3_tokenizer(tokenizer) -> bool:
    """Qwen3 family = its ChatML, think and tool-call tokens are single tokens of the vocabulary."""
    vocab = tokenizer.get_vocab()
    return all(marker in vocab for marker in _QWEN3_MARKERS)


def has_generation_markers(template: str | None) -> bool:
    return bool(template) and bool(_GENERATION_TAG.search(template))


_GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}(.*?)\{%-?\s*endgeneration\s*-?%\}", re.DOTALL)


def generation_marker_problem(template: str) -> str | None:
    """What keeps a training template from marking any token to train (None: nothing)."""
    if not has_generation_markers(template):
        return "has no {% generation %} markers, so no assistant token can be located"
    if all(not body.strip() for body in _GENERATION_BLOCK.findall(template)):
        return "its {% generation %} markers wrap nothing, so no token would be trained"
    return None


def inference_chat_template(tokenizer) -> str:
    """The template a trained executor is served with, saved with its tokenizer.

    Qwen3-family tokenizers get our executor template: Qwen3's rendering with every assistant
    turn's think block kept, so each turn's prompt is the prefix that turn was trained under
    (Qwen3's own template drops empty think blocks from history turns). Other tokenizers keep
    their template, which already renders training and inference text alike.
    """
    if is_qwen3_tokenizer(tokenizer):
        return qwen3_executor_template()
    return tokenizer.chat_template


def training_chat_template(tokenizer, override: str | None = None) -> str:
    """The template that renders rows for training, whatever template the tokenizer carries.

    Qwen3-family tokenizers get ours (their own templates lack generation markers and drop
    think blocks from history turns); other tokenizers must carry `{% generation %}` markers
    (e.g. this project's `chatml_tools.jinja` for SmolLM2). `override` wins when given.
    """
    if override:
        if not has_generation_markers(override):
            raise ValueError("the training chat template override has no {% generation %} markers")
        return override
    if is_qwen3_tokenizer(tokenizer):
        return qwen3_training_template()
    if has_generation_markers(tokenizer.chat_template):
        return tokenizer.chat_template
    raise ValueError(
        f"{type(tokenizer).__name__} ({getattr(tokenizer, 'name_or_path', '?')}) is not a Qwen3-family tokenizer and "
        "its chat template has no {% generation %} markers, so assistant tokens cannot be located; pass a "
        "training template (e.g. executor_sft/llm/templates/chatml_tools.jinja)"
    )
