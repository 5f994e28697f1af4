"""A row rendered with the training template, and its text tokenised with loss labels.

Labels are -100 everywhere except what the executor wrote: its tool-call JSON, its final
report and the end-of-turn token. System, user and tool (retrieved passage) tokens carry no
loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers.utils.chat_template_utils import render_jinja_template

from executor_sft.sft.templates import training_chat_template

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Rendered:
    """A row rendered to text, with the character spans the model is trained on."""

    text: str
    spans: list[tuple[int, int]]


def render_row(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    tokenizer,
    *,
    enable_thinking: bool = False,
    chat_template: str | None = None,
) -> Rendered:
    """Render with the training template; spans end at the end-of-turn token (inclusive)."""
    template = training_chat_template(tokenizer, chat_template)
    rendered, indices = render_jinja_template(
        conversations=[messages],
        tools=tools or None,
        chat_template=template,
        return_assistant_tokens_mask=True,
        enable_thinking=enable_thinking,
        **tokenizer.special_tokens_map,
    )
    text = rendered[0]
    eos = tokenizer.eos_token or ""
    spans = []
    for start, end in indices[0]:
        # Whatever a template puts after the end-of-turn token inside the markers (a newline)
        # is never generated, so it is not trained.
        cut = text.rfind(eos, start, end) if eos else -1
        if cut >= 0:
            end = cut + len(eos)
        if end > start:
            spans.append((start, end))
    return Rendered(text=text, spans=spans)


def tokenize_rendered(rendered: Rendered, tokenizer) -> dict[str, list[int]]:
    """Tokenise the whole text at once (as at inference) and label tokens inside the spans."""
    enc = tokenizer(rendered.text, add_special_tokens=False, return_offsets_mapping=True)
    input_ids: list[int] = list(enc["input_ids"])
    labels = [IGNORE_INDEX] * len(input_ids)
    spans = iter(rendered.spans)
    span = next(spans, None)
    for i, (start, _end) in enumerate(enc["offset_mapping"]):
        while span is not None and start >= span[1]:
            span = next(spans, None)
        if span is not None and span[0] <= start < span[1]:
            labels[i] = input_ids[i]
    return {"input_ids": input_ids, "labels": labels}
