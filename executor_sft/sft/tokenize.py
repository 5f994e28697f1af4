"""Rows -> (input_ids, labels): `tokenize_example` is `fit_row` with the trainer's arguments.

The trainer calls `fit_row` (it also needs the fitting counts); every argument it passes is an
argument here, so the masks the tests check are the masks the trainer trains on. Rows longer
than `max_length` are fitted by shortening retrieved passages (see `executor_sft.sft.length`),
never by cutting assistant tokens.
"""

from __future__ import annotations

from typing import Any

from executor_sft.sft.length import fit_row
from executor_sft.sft.render import IGNORE_INDEX, Rendered, render_row, tokenize_rendered

__all__ = ["IGNORE_INDEX", "Rendered", "render_row", "tokenize_example", "tokenize_rendered"]


def tokenize_example(
    row: dict[str, Any],
    tokenizer,
    max_length: int | None = None,
    *,
    enable_thinking: bool = False,
    chat_template: str | None = None,
    overflow: str = "truncate_tool",
    min_passage_tokens: int = 24,
) -> dict[str, list[int]]:
    """Tokenise one SFT row exactly as the trainer does: `{"input_ids", "labels"}`.

    `overflow` applies when the row exceeds `max_length`: "truncate_tool" shortens the
    longest retrieved passages first, "drop" refuses; both raise `RowTooLongError` when the
    row cannot fit (assistant, system and user tokens alone exceed `max_length`).
    """
    return fit_row(
        row,
        tokenizer,
        max_length,
        enable_thinking=enable_thinking,
        chat_template=chat_template,
        overflow=overflow,
        min_line_tokens=min_passage_tokens,
    ).example
