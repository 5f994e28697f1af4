"""Episodes -> SFT rows + composition report: the whole filter as one streaming object."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from executor_sft.errors import ConfigError
from executor_sft.files import Located
from executor_sft.filters.config import FilterConfig
from executor_sft.filters.dedupe import Deduper
from executor_sft.filters.records import RecordError, parse_episode
from executor_sft.filters.report import CompositionReport
from executor_sft.filters.rows import RowError, SFTRow, to_sft_row
from executor_sft.filters.strata import classify_episode
from executor_sft.llm.backends import load_tokenizer
from executor_sft.sft.fidelity import check_row
from executor_sft.sft.length import fit_row
from executor_sft.sft.templates import training_chat_template

CAPPED = "question_stratum_cap"
"""Exclusion reason of a row beyond `max_records_per_question_stratum` for its (question, stratum)."""


def offered_tools(calls: Any) -> list[dict[str, Any]] | None:
    """The tool schemas of a run's first model call, as recorded (None when not recorded)."""
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        tools = calls[0].get("tools")
        if isinstance(tools, list) and all(isinstance(t, dict) for t in tools):
            return tools
    return None


def sampled_tokens_of(calls: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any] | None] | None:
    """The sampled ids of each assistant message: the answered calls' `sampled_tokens`, in order.

    Every answered call (no `error`) appended one assistant message; None when no call recorded
    ids, or when the counts disagree (the ids could not be matched to turns).
    """
    if not isinstance(calls, list):
        return None
    answered = [c for c in calls if isinstance(c, dict) and c.get("error") is None]
    sampled = [
        c.get("sampled_tokens") if isinstance(c.get("sampled_tokens"), dict) else None for c in answered
    ]
    n_assistant = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    if not any(sampled) or len(sampled) != n_assistant:
        return None
    return sampled


def load_fidelity_tokenizer(spec: str | None) -> Any:
    """The tokenizer rows are compared under (None without one); one that cannot render rows for
    training (no Qwen3 vocabulary, no `{% generation %}` markers) is a one-line error."""
    tokenizer = load_tokenizer(spec)
    if tokenizer is None:
        return None
    try:
        training_chat_template(tokenizer)
    except ValueError as exc:
        raise ConfigError(f"--fidelity_tokenizer {spec}: {exc}") from None
    return tokenizer


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

    def __init__(self, config: FilterConfig | None = None, fidelity_tokenizer: Any = None):
        self.config = config or FilterConfig()
        self.report = CompositionReport(self.config, fidelity_checked=fidelity_tokenizer is not None)
        self.fidelity_tokenizer = fidelity_tokenizer
        """With a tokenizer, each kept row's re-rendered assistant turns are compared with its sampled ids."""
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
                    sampled_tokens=sampled_tokens_of(run.calls, run.messages),
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
            self._keep(row, run.role)
            rows.append(row)
        return rows

    def _keep(self, row: SFTRow, role: str) -> None:
        """Count a row the filter emits, and how its tokens compare with the sampled ones."""
        self.report.add_row(dict(row), role)
        tokenizer = self.fidelity_tokenizer
        has_ids = "sampled_tokens" in row
        example = fit_row(dict(row), tokenizer, None).example if tokenizer is not None and has_ids else {}
        fidelity = check_row(dict(row), example, tokenizer, compare=tokenizer is not None)
        self.report.fidelity.add(row["stratum"], fidelity, row["source_run_id"])

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
            self._keep(row, role)
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
