"""Token fidelity: whether the tokens a row trains on are the tokens its model sampled.

A row's assistant turns are re-rendered from their parsed messages: tool-call arguments are
decoded and serialised again, text is re-tokenised as a whole. So the trained ids can differ
from the sampled ones (`{"query":"x"}` sampled, `{"query": "x"}` trained; another split of the
same text). Rows built from runs whose backend returned its ids carry them
(`sampled_tokens`: one `{"ids", "vocabulary"}` or null per assistant message, in order), and
`check_row` compares each turn's trained span with them, wherever the row is tokenised with a
tokenizer of the same vocabulary. Ids of another (or an unknown) vocabulary are not compared.

A turn that ended at a stop string (the tag protocol's `</search>`) has no end-of-turn token
among its ids; the rendering adds one, so the comparison does too.

Policies (`token_drift`): "warn" trains on the rendering and counts drifted rows, "refuse"
drops them (counted), "recorded" trains each compared turn on its sampled ids instead.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.sft.render import IGNORE_INDEX

logger = logging.getLogger(__name__)

SAMPLED_TOKENS = "sampled_tokens"
"""The SFT row key of the sampled ids (absent when the run's backend returned none)."""
DRIFT_POLICIES = ("warn", "refuse", "recorded")
Status = Literal["without_ids", "other_vocabulary", "unchecked", "match", "drift"]


@dataclass(frozen=True)
class RowFidelity:
    """One row's comparison: its status, the turns compared, and where it first drifted."""

    status: Status
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Token index ranges `[start, end)` of the assistant turns in the tokenised row."""
    recorded: dict[int, list[int]] = field(default_factory=dict)
    """Turn index -> the sampled ids it is compared with (end-of-turn added where missing)."""
    detail: str = ""
    """For a drift: the first turn that differs and both texts from there."""


def assistant_spans(labels: list[int]) -> list[tuple[int, int]]:
    """Runs of trained tokens: one per assistant turn (each ends in its end-of-turn token)."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, label in enumerate(labels):
        if label != IGNORE_INDEX and start is None:
            start = i
        elif label == IGNORE_INDEX and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(labels)))
    return spans


def _recorded_ids(ids: list[int], trained: list[int], special: set[int]) -> list[int]:
    """The sampled ids, with the end-of-turn token the rendering ends the turn with when they lack one."""
    end = trained[-1] if trained else None
    if end in special and (not ids or ids[-1] != end):
        return [*ids, end]
    return list(ids)


def _describe(turn: int, trained: list[int], sampled: list[int], tokenizer) -> str:
    i = next((k for k, (a, b) in enumerate(zip(trained, sampled, strict=False)) if a != b), None)
    if i is None:
        i = min(len(trained), len(sampled))
    lo = max(0, i - 2)
    return (
        f"assistant turn {turn}, token {i}: trained {tokenizer.decode(trained[lo : i + 8])!r}, "
        f"sampled {tokenizer.decode(sampled[lo : i + 8])!r}"
    )


def check_row(
    row: dict[str, Any], example: dict[str, list[int]], tokenizer, *, compare: bool = True
) -> RowFidelity:
    """Compare the tokenised row's assistant spans with the ids the row says were sampled.

    `compare=False` only classifies (a filter without a tokenizer): a row with ids is "unchecked".
    """
    sampled = row.get(SAMPLED_TOKENS)
    if not isinstance(sampled, list) or not any(isinstance(s, dict) for s in sampled):
        return RowFidelity("without_ids")
    if not compare:
        return RowFidelity("unchecked")
    vocabulary = vocabulary_id(tokenizer)
    same = {i: s for i, s in enumerate(sampled) if isinstance(s, dict) and s.get("vocabulary") == vocabulary}
    if not same:
        return RowFidelity("other_vocabulary")
    spans = assistant_spans(example["labels"])
    n_assistant = sum(1 for m in row["messages"] if m.get("role") == "assistant")
    if len(sampled) != n_assistant or len(spans) != n_assistant:
        detail = f"{len(sampled)} sampled entries, {n_assistant} assistant turns, {len(spans)} trained spans"
        return RowFidelity("drift", spans, {}, detail)
    special = set(tokenizer.all_special_ids)
    recorded: dict[int, list[int]] = {}
    detail = ""
    for turn, entry in same.items():
        start, end = spans[turn]
        trained = example["input_ids"][start:end]
        ids = _recorded_ids([int(i) for i in entry.get("ids") or []], trained, special)
        recorded[turn] = ids
        if ids != trained and not detail:
            detail = _describe(turn, trained, ids, tokenizer)
    return RowFidelity("drift" if detail else "match", spans, recorded, detail)


def train_on_recorded(example: dict[str, list[int]], fidelity: RowFidelity) -> dict[str, list[int]]:
    """The example with each compared assistant span replaced by its sampled ids (all trained)."""
    input_ids, labels = [], []
    pos = 0
    for turn, (start, end) in enumerate(fidelity.spans):
        input_ids += example["input_ids"][pos:start]
        labels += example["labels"][pos:start]
        ids = fidelity.recorded.get(turn)
        if ids is None:
            ids = example["input_ids"][start:end]
        input_ids += ids
        labels += ids
        pos = end
    input_ids += example["input_ids"][pos:]
    labels += example["labels"][pos:]
    return {"input_ids": input_ids, "labels": labels}


class FidelityReport:
    """Counts per stratum: rows checked (same vocabulary), drifted, without ids, other vocabulary."""

    def __init__(self, policy: str | None = "warn"):
        """`policy` None: counting only (the filter, which trains nothing)."""
        if policy is not None and policy not in DRIFT_POLICIES:
            raise ValueError(f"token_drift must be one of {DRIFT_POLICIES}, got {policy!r}")
        self.policy = policy
        self._counts: dict[str, Counter[str]] = {}
        self.refused = 0
        self.trained_on_recorded = 0
        self.examples: list[str] = []

    def add(self, stratum: str, fidelity: RowFidelity, row_id: str = "") -> None:
        self._counts.setdefault(stratum, Counter())[fidelity.status] += 1
        if fidelity.status == "drift" and len(self.examples) < 5:
            self.examples.append(f"{row_id}: {fidelity.detail}")

    @property
    def any_ids(self) -> bool:
        return any(
            c[s] for c in self._counts.values() for s in ("other_vocabulary", "unchecked", "match", "drift")
        )

    def _stratum(self, counts: Counter[str]) -> dict[str, int]:
        out = {
            "rows": sum(counts.values()),
            "checked": counts["match"] + counts["drift"],
            "drifted": counts["drift"],
            "without_ids": counts["without_ids"],
            "other_vocabulary": counts["other_vocabulary"],
        }
        if counts["unchecked"]:
            out["unchecked"] = counts["unchecked"]
        return out

    def totals(self) -> dict[str, int]:
        return self._stratum(sum(self._counts.values(), Counter()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **({"policy": self.policy} if self.policy else {}),
            "totals": self.totals(),
            "strata": {s: self._stratum(c) for s, c in sorted(self._counts.items())},
        }
        if self.policy == "refuse":
            out["refused"] = self.refused
        if self.policy == "recorded":
            out["trained_on_recorded"] = self.trained_on_recorded
        if self.examples:
            out["first_drifts"] = list(self.examples)
        return out

    def summary(self) -> str:
        t = self.totals()
        line = (
            f"token fidelity{f' ({self.policy})' if self.policy else ''}: {t['checked']} rows checked, {t['drifted']} drifted, "
            f"{t['without_ids']} without ids, {t['other_vocabulary']} of another vocabulary"
        )
        strata = [
            f"{name} {c['drift']}/{c['match'] + c['drift']}"
            for name, c in sorted(self._counts.items())
            if c["match"] + c["drift"]
        ]
        if strata:
            line += f" (drifted/checked: {', '.join(strata)})"
        if self.policy == "refuse":
            line += f"; {self.refused} refused"
        if self.policy == "recorded":
            line += f"; {self.trained_on_recorded} trained on the sampled ids"
        return line
