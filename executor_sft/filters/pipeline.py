"""Episodes -> SFT rows + composition report: the whole filter as one streaming object."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from executor_sft.filters.config import FilterConfig
from executor_sft.filters.dedupe import Deduper
from executor_sft.filters.records import RecordError, parse_episode
from executor_sft.filters.report import CompositionReport
from executor_sft.filters.rows import RowError, SFTRow, to_sft_row
from executor_sft.filters.strata import classify_episode
from executor_sft.jsonl import Located

CAPPED = "question_stratum_cap"
"""Exclusion reason of a row beyond `max_records_per_question_stratum` for its (question, stratum)."""


def offered_tools(calls: Any) -> list[dict[str, Any]] | None:
    """The tool schemas of a run's first model call, as recorded (None when not recorded)."""
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        tools = calls[0].get("tools")
        if isinstance(tools, list) and all(isinstance(t, dict) for t in tools):
            return tools
    return None


def generated_chars(messages: list[dict[str, Any]]) -> int:
    """Characters the model generated in a row: assistant content, reasoning and tool-call arguments."""
    n = 0
    for m in messages:
        if m.get("role") != "assistant":
            continue
        n += len(m.get("content") or "") + len(m.get("reasoning_content") or "")
        for call in m.get("tool_calls") or []:
            args = call.get("function", {}).get("arguments")
            n += len(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True))
    return n


class EpisodeFilter:
    """Stateful filter: feed episodes in file order, collect rows; `report` grows as it goes.

    State across episodes is only the dedupe set and the report counters; every other rule
    (coverage by student runs, counterfactual lookup) is local to one episode, so inputs of
    any size stream through. With `max_records_per_question_stratum` the kept rows of each
    (question, stratum) are held until the input ends (at most that many per key) and `stream`
    yields them last, in file order; duplicates are removed first, as without the cap.
    """

    def __init__(self, config: FilterConfig | None = None):
        self.config = config or FilterConfig()
        self.report = CompositionReport(self.config)
        self._deduper = Deduper(include_reasoning=True)  # rows carry reasoning only if keep_reasoning
        self._held: dict[tuple[str, str, str], list[tuple[tuple, SFTRow, str]]] = {}
        self._seq = itertools.count()

    def process(self, episode: Any, where: str = "<episode>") -> list[SFTRow]:
        """Rows from one episode (a dict or `Episode`); `where` names it in errors (`file:line`)."""
        cfg = self.config
        record = parse_episode(episode, where)
        self.report.add_episode(len(record.runs))
        rows: list[SFTRow] = []
        for i, decision in enumerate(classify_episode(record, cfg)):
            run = decision.run
            if not decision.kept:
                self.report.add_exclusion(decision.reason or "unknown")
                continue
            if run.messages is None:
                raise RecordError(where, f"runs[{i}].messages", "is missing (needed to build the SFT row)")
            try:
                row = to_sft_row(
                    run.messages,
                    stratum=decision.stratum or "",
                    source_run_id=run.run_id,
                    question_id=record.question.id,
                    dataset=record.question.dataset,
                    keep_reasoning=cfg.keep_reasoning,
                    tool_arguments=cfg.tool_arguments,
                    tools=offered_tools(run.calls),
                )
            except RowError as exc:
                self.report.add_exclusion(exc.reason)
                continue
            if cfg.dedupe and not self._deduper.add(row["messages"]):
                self.report.add_exclusion("duplicate")
                continue
            if cfg.max_records_per_question_stratum is not None:
                self._hold(row, run.role, run.n_searches)
                continue
            self.report.add_row(dict(row), run.role)
            rows.append(row)
        return rows

    def _hold(self, row: SFTRow, role: str, n_searches: int) -> None:
        """Keep `row` among the best `max_records_per_question_stratum` of its (question, stratum)."""
        key = (row["dataset"], row["question_id"], row["stratum"])
        rank = (
            role != self.config.student_role,
            n_searches,
            generated_chars(row["messages"]),
            next(self._seq),
        )
        held = self._held.setdefault(key, [])
        held.append((rank, row, role))
        held.sort(key=lambda item: item[0])
        if len(held) > (self.config.max_records_per_question_stratum or 0):
            held.pop()
            self.report.add_exclusion(CAPPED)

    def flush(self) -> list[SFTRow]:
        """Rows held back by `max_records_per_question_stratum`, in file order (none without it).

        The best rows of a question are only known once every episode is read, so with the cap
        `process` returns nothing and `stream` yields these at the end.
        """
        kept = sorted((item for held in self._held.values() for item in held), key=lambda item: item[0][-1])
        self._held.clear()
        for _, row, role in kept:
            self.report.add_row(dict(row), role)
        return [row for _, row, _ in kept]

    def stream(self, episodes: Iterable[Any]) -> Iterator[SFTRow]:
        """Rows of every episode, lazily; items may be records or `Located` (from `iter_jsonl`)."""
        for i, item in enumerate(episodes, start=1):
            if isinstance(item, Located):
                yield from self.process(item.record, item.where)
            else:
                yield from self.process(item, f"record {i}")
        yield from self.flush()


@dataclass
class FilterResult:
    rows: list[SFTRow] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    """`CompositionReport.to_dict()`: totals, strata, datasets, exclusions, config."""


def filter_episodes(episodes: Iterable[Any], config: FilterConfig | None = None) -> FilterResult:
    """Filter episodes (dicts, `Episode` models or `Located` records) in order into SFT rows."""
    filt = EpisodeFilter(config)
    rows = list(filt.stream(episodes))
    return FilterResult(rows=rows, report=filt.report.to_dict())
