"""Fitting long trajectories into `max_length` without touching what the executor wrote.

Rule ("truncate_tool", the default): while the tokenised row is too long, cap every line of
every tool message (one retrieved passage per line) at a common token budget, lowering the
cap until the row fits, so the longest passages are shortened first. A shortened line keeps
its head (the `Doc i (Title: T)` header and the first words) and no mark: the retriever never
returns one at inference, and a student trained on marked cuts searched again after the mark
instead of after what the passages said (bench/results/truncation_cue.md).
No line goes below `min_line_tokens`; if the row still does not fit it is dropped. System,
user and assistant messages (tool calls, the final report, end-of-turn) are never changed.
"drop" drops every over-long row instead. Both outcomes are counted in `LengthReport`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from executor_sft.sft.render import render_row, tokenize_rendered

OVERFLOW_POLICIES = ("truncate_tool", "drop")


class RowTooLongError(ValueError):
    """The row cannot fit `max_length` under the chosen policy."""


@dataclass
class FitResult:
    example: dict[str, list[int]]
    truncated_lines: int = 0
    removed_tokens: int = 0


@dataclass
class LengthReport:
    """Counts for the training log and the model card."""

    max_length: int | None
    policy: str
    rows: int = 0
    kept_whole: int = 0
    truncated: int = 0
    dropped: int = 0
    removed_tool_tokens: int = 0
    dropped_ids: list[str] = field(default_factory=list)
    longest: int = 0
    by_searches: dict[int, list[int]] = field(default_factory=dict)

    def count(self, messages: list[dict[str, Any]], fit: FitResult) -> None:
        """Count a kept row: whole or shortened, by its number of searches (tool messages)."""
        if fit.truncated_lines:
            self.truncated += 1
            self.removed_tool_tokens += fit.removed_tokens
        else:
            self.kept_whole += 1
        self.longest = max(self.longest, len(fit.example["input_ids"]) + fit.removed_tokens)
        searches = sum(m.get("role") == "tool" for m in messages)
        counts = self.by_searches.setdefault(searches, [0, 0])
        counts[0] += 1
        counts[1] += bool(fit.truncated_lines)

    def summary(self) -> str:
        return (
            f"{self.rows} rows, max_length={self.max_length}, policy={self.policy}: "
            f"{self.kept_whole} whole, {self.truncated} with shortened passages "
            f"({self.removed_tool_tokens} passage tokens removed), {self.dropped} dropped"
        )

    def cue(self, min_rows: int = 5, gap: float = 0.5) -> str | None:
        """A warning when shortening sorts the rows by their number of searches.

        Multi-search rows hold more passages, so they overflow first. When the rows of one search
        count are mostly cut and those of another mostly whole, the cut first results predict
        whether the teacher searched again, and a student can learn to search again only after cut
        results, which whole results at inference never are."""
        shares = {n: cut / rows for n, (rows, cut) in self.by_searches.items() if rows >= min_rows}
        if len(shares) < 2 or max(shares.values()) - min(shares.values()) < gap:
            return None
        parts = ", ".join(
            f"{self.by_searches[n][1]} of {self.by_searches[n][0]} {n}-search rows" for n in sorted(shares)
        )
        return (
            f"passages were shortened in {parts}: the cut tells how many times the teacher searched, a cue "
            f"a student can learn instead of reading the results; raise max_length to {self.longest} (the "
            "longest row) so that no row is cut"
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "dropped_ids"} | {
            "dropped_ids": self.dropped_ids[:50]
        }


def _tokenize(messages, tools, tokenizer, enable_thinking, chat_template):
    rendered = render_row(
        messages, tools, tokenizer, enable_thinking=enable_thinking, chat_template=chat_template
    )
    return tokenize_rendered(rendered, tokenizer)


def _cap_lines(lengths: list[int], excess: int, floor: list[int]) -> int | None:
    """Largest common cap whose cut removes at least `excess` tokens (None if impossible)."""

    def removed(cap: int) -> int:
        return sum(max(n - max(cap, f), 0) for n, f in zip(lengths, floor, strict=True))

    if removed(0) < excess:
        return None
    lo, hi = 0, max(lengths)
    while lo < hi:  # binary search for the largest cap that removes enough
        mid = (lo + hi + 1) // 2
        if removed(mid) >= excess:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cut_lines(
    messages: list[dict[str, Any]],
    tool_lines: list[tuple[int, int, str]],
    ids: list[list[int]],
    keep: list[int],
    tokenizer,
) -> int:
    """Rewrite the tool messages with each line cut to its `keep` tokens; return how many were cut."""
    contents: dict[int, list[str]] = {}
    truncated = 0
    for (i, _j, line), line_ids, k in zip(tool_lines, ids, keep, strict=True):
        if len(line_ids) > k:
            line = tokenizer.decode(line_ids[:k]).rstrip()
            truncated += 1
        contents.setdefault(i, []).append(line)
    for i, lines in contents.items():
        messages[i] = {**messages[i], "content": "\n".join(lines)}
    return truncated


def fit_row(
    row: dict[str, Any],
    tokenizer,
    max_length: int | None,
    *,
    enable_thinking: bool = False,
    chat_template: str | None = None,
    overflow: str = "truncate_tool",
    min_line_tokens: int = 24,
) -> FitResult:
    """Tokenise `row`, shortening passages if needed; raises `RowTooLongError` if it cannot fit."""
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {overflow!r}")
    messages, tools = row["messages"], row.get("tools")
    example = _tokenize(messages, tools, tokenizer, enable_thinking, chat_template)
    if max_length is None or len(example["input_ids"]) <= max_length:
        return FitResult(example)
    if overflow == "drop":
        raise RowTooLongError(f"{len(example['input_ids'])} tokens > max_length={max_length} (policy drop)")

    messages = copy.deepcopy(messages)
    tool_lines = [
        (i, j, line)
        for i, m in enumerate(messages)
        if m.get("role") == "tool"
        for j, line in enumerate((m.get("content") or "").split("\n"))
    ]
    if not tool_lines:
        raise RowTooLongError(
            f"{len(example['input_ids'])} tokens > max_length={max_length} and no tool output"
        )
    ids = tokenizer([line for _, _, line in tool_lines], add_special_tokens=False)["input_ids"]
    floor = [min(len(x), min_line_tokens) for x in ids]
    original = len(example["input_ids"])
    excess = original - max_length
    for _ in range(8):  # re-tokenising the joined text can differ by a few tokens: retry
        cap = _cap_lines([len(x) for x in ids], excess, floor)
        if cap is None:
            cap = 0  # every line at its floor: the last try, then give up
        truncated = _cut_lines(messages, tool_lines, ids, [max(cap, f) for f in floor], tokenizer)
        example = _tokenize(messages, tools, tokenizer, enable_thinking, chat_template)
        if len(example["input_ids"]) <= max_length:
            return FitResult(
                example, truncated_lines=truncated, removed_tokens=original - len(example["input_ids"])
            )
        if cap == 0:
            break
        excess += len(example["input_ids"]) - max_length
    raise RowTooLongError(
        f"{original} tokens > max_length={max_length}: even with every passage line cut to "
        f"{min_line_tokens} tokens it needs {len(example['input_ids'])}"
    )
