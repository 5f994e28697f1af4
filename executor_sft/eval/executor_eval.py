"""Executor-level evaluation: one executor on single-hop sub-queries, through the real `run_executor`.

The pipeline evaluation (`run_eval`) scores whole questions; this one isolates the role we
train. Each sub-query (a question row with gold answers, e.g. a synthetic world's
`subqueries_test.jsonl`) goes to `run_executor` with a retriever, exactly as in collection,
and the report is scored against the gold answers: report format validity
(`finish == "report"`), EM, F1, searches per invocation (mean, 0 / 1 / >=2 shares), tokens
per sub-query (prompt + completion, as the backend reports them) and gold-passage recall.

Every score is also reported per sub-query type (`ExecutorEvalResult.by_type`, from each
row's `type` field when present, e.g. the synthetic world's `single_hop` and
`single_hop_ambiguous`), so a gain on ambiguous sub-queries is not averaged away;
`markdown_table_by_type` renders one row per (model, type).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from executor_sft.agents.executor import run_executor
from executor_sft.agents.settings import ExecutorSettings
from executor_sft.data import load_questions
from executor_sft.errors import InputError
from executor_sft.llm.base import ChatModel
from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.retrieval.base import Retriever
from executor_sft.safe_interrupt import run_async
from executor_sft.schema import ExecutorRun, Question

COLUMNS = (
    ("model", "model"),
    ("n", "n"),
    ("format_valid", "report format valid"),
    ("em", "EM"),
    ("f1", "F1"),
    ("searches_mean", "searches / call"),
    ("share_1_search", "1 search"),
    ("share_2plus_searches", ">=2 searches"),
    ("tokens_per_subquery", "tokens / sub-query"),
    ("gold_recall", "gold passage retrieved"),
)
UNTYPED = "untyped"
"""The `by_type` key of sub-queries without a `type` field when others have one."""


@dataclass
class SubQueryResult:
    """One sub-query's outcome (kept so a table can be traced back to the runs)."""

    id: str
    sub_query: str
    golden_answers: list[str]
    finish: str
    answer: str | None
    em: float
    f1: float
    n_searches: int
    tokens: int
    gold_retrieved: bool | None
    type: str | None = None
    """The sub-query's `type` field (e.g. `single_hop`, `single_hop_ambiguous`), if it has one."""
    n_turns: int = 0
    """Assistant turns (the turn budget); with parallel tool calls fewer than searches + 1."""


@dataclass
class ExecutorEvalResult:
    """Aggregate scores of one executor over a sub-query set; shares are in [0, 1]."""

    model: str
    n: int
    format_valid: float
    em: float
    f1: float
    searches_mean: float
    share_0_searches: float
    share_1_search: float
    share_2plus_searches: float
    tokens_per_subquery: float
    gold_recall: float | None
    seconds: float
    turns_mean: float = 0.0
    """Assistant turns per sub-query: the other budget, next to `searches_mean` (a search is one
    query, and one turn may hold several)."""
    items: list[SubQueryResult] = field(default_factory=list, repr=False)
    by_type: dict[str, ExecutorEvalResult] = field(default_factory=dict, repr=False)
    """The same scores per sub-query type (sorted by type; empty when no sub-query has a type).
    Each holds its type's items; its `seconds` is 0 (time is measured for the whole set)."""

    def to_dict(self, with_items: bool = False) -> dict[str, Any]:
        """The overall scores (same keys as ever), `items` if asked, and `by_type` summaries
        (the same keys but `seconds`, `items` and `by_type`)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("items", "by_type")}
        if with_items:
            d["items"] = [asdict(i) for i in self.items]
        d["by_type"] = {
            t: {k: v for k, v in r.to_dict().items() if k not in ("seconds", "by_type")}
            for t, r in self.by_type.items()
        }
        return d

    @staticmethod
    def markdown_header() -> str:
        names = [label for _, label in COLUMNS]
        return "| " + " | ".join(names) + " |\n|" + "|".join("---" for _ in names) + "|"

    def markdown_row(self, label: str | None = None) -> str:
        cells = []
        for key, _ in COLUMNS:
            value = label if key == "model" and label is not None else getattr(self, key)
            cells.append(_fmt(key, value))
        return "| " + " | ".join(cells) + " |"


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in ("format_valid", "em", "share_1_search", "share_2plus_searches", "gold_recall"):
        return f"{100 * value:.1f}%"
    if key in ("f1", "searches_mean"):
        return f"{value:.3f}" if key == "f1" else f"{value:.2f}"
    if key == "tokens_per_subquery":
        return f"{value:.0f}"
    return str(value)


def markdown_table(results: Sequence[ExecutorEvalResult], labels: Sequence[str] | None = None) -> str:
    """A markdown table with one row per result (labels replace the model names)."""
    labels = list(labels) if labels is not None else [r.model for r in results]
    return "\n".join(
        [
            ExecutorEvalResult.markdown_header(),
            *(r.markdown_row(lb) for r, lb in zip(results, labels, strict=True)),
        ]
    )


def markdown_table_by_type(results: Sequence[ExecutorEvalResult], labels: Sequence[str] | None = None) -> str:
    """A markdown table with one row per (result, sub-query type), types in `by_type` order."""
    labels = list(labels) if labels is not None else [r.model for r in results]
    names = [COLUMNS[0][1], "sub-query type", *(label for _, label in COLUMNS[1:])]
    lines = ["| " + " | ".join(names) + " |", "|" + "|".join("---" for _ in names) + "|"]
    for result, label in zip(results, labels, strict=True):
        for type_, sub in result.by_type.items():
            cells = [label, type_, *(_fmt(key, getattr(sub, key)) for key, _ in COLUMNS[1:])]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_subqueries(path: str | Path, limit: int | None = None) -> list[Question]:
    """Sub-query rows (any file `load_questions` reads), the first `limit` of them."""
    rows = load_questions(path)
    if not rows:
        raise InputError(f"{path}: no sub-queries")
    return rows[:limit] if limit is not None else rows


def score_run(question: Question, run: ExecutorRun) -> SubQueryResult:
    """Score one run: an answer counts only when the run ended with a report."""
    answer = run.report.answer if run.finish == "report" and run.report is not None else None
    gold = set(question.positive_doc_ids or [])
    retrieved = {d for s in run.searches for d in s.doc_ids}
    return SubQueryResult(
        id=question.id,
        sub_query=question.question,
        golden_answers=list(question.golden_answers),
        finish=run.finish,
        answer=answer,
        em=exact_match(answer, question.golden_answers) if answer is not None else 0.0,
        f1=f1_score(answer, question.golden_answers) if answer is not None else 0.0,
        n_searches=run.n_searches,
        tokens=run.usage.prompt_tokens + run.usage.completion_tokens,
        gold_retrieved=bool(gold & retrieved) if gold else None,
        type=_type_of(question),
        n_turns=run.n_turns,
    )


def _type_of(question: Question) -> str | None:
    value = (question.model_extra or {}).get("type")
    return str(value) if value not in (None, "") else None


def aggregate(
    model: str, items: list[SubQueryResult], seconds: float = 0.0, *, by_type: bool = True
) -> ExecutorEvalResult:
    """Scores over `items`, and (`by_type`) the same scores per sub-query type."""
    n = len(items)
    if n == 0:
        raise ValueError("no sub-queries were evaluated")

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    with_gold = [i.gold_retrieved for i in items if i.gold_retrieved is not None]
    return ExecutorEvalResult(
        model=model,
        n=n,
        format_valid=mean([float(i.finish == "report") for i in items]),
        em=mean([i.em for i in items]),
        f1=mean([i.f1 for i in items]),
        searches_mean=mean([float(i.n_searches) for i in items]),
        share_0_searches=mean([float(i.n_searches == 0) for i in items]),
        share_1_search=mean([float(i.n_searches == 1) for i in items]),
        share_2plus_searches=mean([float(i.n_searches >= 2) for i in items]),
        tokens_per_subquery=mean([float(i.tokens) for i in items]),
        gold_recall=mean([float(g) for g in with_gold]) if with_gold else None,
        seconds=seconds,
        turns_mean=mean([float(i.n_turns) for i in items]),
        items=items,
        by_type=_by_type(model, items) if by_type else {},
    )


def _by_type(model: str, items: list[SubQueryResult]) -> dict[str, ExecutorEvalResult]:
    if all(i.type is None for i in items):
        return {}
    groups: dict[str, list[SubQueryResult]] = {}
    for item in items:
        groups.setdefault(item.type or UNTYPED, []).append(item)
    return {t: aggregate(model, groups[t], by_type=False) for t in sorted(groups)}


async def evaluate_executor(
    model: ChatModel,
    retriever: Retriever,
    sub_queries: Sequence[Question],
    settings: ExecutorSettings | None = None,
    *,
    name: str | None = None,
    concurrency: int = 1,
    runs_path: str | Path | None = None,
    show_progress: bool = True,
    **overrides: object,
) -> ExecutorEvalResult:
    """Run `model` as the executor on every sub-query and aggregate the scores.

    Use the settings the model's training runs were collected with (e.g.
    `PipelineConfig.executor_settings(role)`): the system prompt is filled from them. Keyword
    `overrides` (`max_turns=`, `top_k=`, ...) replace fields of `settings`. `runs_path` gets one JSON line per run (the complete
    `ExecutorRun` plus its score) for inspection.
    """
    start = time.perf_counter()
    settings = (settings or ExecutorSettings()).replace(**overrides) if overrides else settings
    name = name or str(getattr(model, "name", "executor"))
    semaphore = asyncio.Semaphore(max(1, concurrency))
    bar = tqdm(
        total=len(sub_queries), desc=f"eval {name}", unit="sq", disable=not show_progress, dynamic_ncols=True
    )

    async def one(i: int, q: Question) -> tuple[ExecutorRun, SubQueryResult]:
        async with semaphore:
            run = await run_executor(
                model,
                retriever,
                q.question,
                settings,
                role="executor",
                run_id=f"eval/{q.id}",
                sub_query_index=i,
            )
        item = score_run(q, run)
        bar.update(1)
        return run, item

    try:
        pairs = await asyncio.gather(*(one(i, q) for i, q in enumerate(sub_queries)))
    finally:
        bar.close()
    if runs_path is not None:
        path = Path(runs_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for run, item in pairs:
                f.write(json.dumps({"score": asdict(item), "run": run.model_dump(mode="json")}) + "\n")
    return aggregate(name, [item for _, item in pairs], time.perf_counter() - start)


def evaluate_executor_sync(*args: Any, **kwargs: Any) -> ExecutorEvalResult:
    """`evaluate_executor` for callers without an event loop."""
    return run_async(evaluate_executor(*args, **kwargs))


__all__ = [
    "ExecutorEvalResult",
    "SubQueryResult",
    "aggregate",
    "evaluate_executor",
    "evaluate_executor_sync",
    "load_subqueries",
    "markdown_table",
    "markdown_table_by_type",
    "score_run",
]
