"""Wide (table) training data, WideSeek-R1's pipeline (Sec. 4, App. C.1): query, two answers, filter.

From each source table (`{id, topic, header, rows}`): a target row count is drawn from 10-50,
the generator writes a question asking for that table (`QUERY_PROMPT`), then two independent
Markdown-table answers (`ANSWER_PROMPT`, two calls). The minimal unique column set is computed
from the first answer (ours: the seed has the model name it; a smallest set of columns whose
values tell every row apart, found exhaustively, is exact and free). An instance is kept when the
two answers agree at >= 0.9 (item F1 of the second against the first, rows aligned by the
unique columns, `metrics.table_scores`) and the first has >= 3 rows. Output rows are
`question`, `answer` (the first table) and `unique_columns`, the seed's data format, plus `id`
and `golden_answers` so the file reads as a questions file (`schema.Question`).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from executor_sft.llm.base import SamplingParams
from executor_sft.metrics.table import parse_markdown_table, table_scores

MIN_TARGET_ROWS, MAX_TARGET_ROWS = 10, 50
"""Target row counts are drawn from this range (WideSeek-R1, Sec. 4 "Query Generation")."""
MIN_AGREEMENT = 0.9
"""Two answers must agree at least this much (Sec. 4 "QA Pair Filtering")."""
MIN_ROWS = 3
"""A kept table has at least this many rows (Sec. 4 "QA Pair Filtering")."""
SEED_RETENTION = 0.7328
"""Share the seed kept after its filtering stage (App. C.1)."""

QUERY_PROMPT = """Write one information-seeking request whose answer is a table.
Source table: {table_id}
Topic: {topic}
Columns: {columns}
Ask for about {target_rows} rows (fewer if fewer exist), name every column, and say the answer must be a Markdown table with exactly these columns.
Reply with the request only."""

ANSWER_PROMPT = """Answer the request below with one Markdown table and nothing else.
Source table: {table_id}
Request: {question}"""


@dataclass
class SourceTable:
    id: str
    topic: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class Verdict:
    kept: bool
    reason: str | None  # "no_table", "inconsistent", "too_few_rows", "no_unique_columns"
    agreement: float
    rows: int


def minimal_unique_columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str] | None:
    """The smallest set of columns (earliest columns first among equals) whose normalised values
    differ on every pair of rows; None when even all columns repeat a row."""
    norm = [[" ".join(str(c).lower().split()) for c in row] for row in rows]
    for size in range(1, len(header) + 1):
        for cols in itertools.combinations(range(len(header)), size):
            keys = [tuple(row[i] for i in cols) for row in norm]
            if len(set(keys)) == len(keys):
                return [header[i] for i in cols]
    return None


def judge_pair(first: str | None, second: str | None) -> tuple[Verdict, list[str] | None]:
    """The filter on two answers: (verdict, unique columns of the first)."""
    a = parse_markdown_table(first)
    if a is None or not a.rows:
        return Verdict(False, "no_table", 0.0, 0), None
    unique = minimal_unique_columns(a.header, a.rows)
    if unique is None:
        return Verdict(False, "no_unique_columns", 0.0, len(a.rows)), None
    agreement = table_scores(second or "", first or "", unique).item_f1
    if agreement < MIN_AGREEMENT:
        return Verdict(False, "inconsistent", agreement, len(a.rows)), unique
    if len(a.rows) < MIN_ROWS:
        return Verdict(False, "too_few_rows", agreement, len(a.rows)), unique
    return Verdict(True, None, agreement, len(a.rows)), unique


def _text(result: Any) -> str:
    content = (result.message or {}).get("content") if hasattr(result, "message") else None
    return str(content or "").strip()


def _table_block(text: str) -> str:
    """The answer's `|` lines (a model may wrap them in prose or a code fence)."""
    lines = [line for line in text.splitlines() if line.strip().startswith("|")]
    return "\n".join(lines)


async def build_instance(
    table: SourceTable, generator: Any, rng: random.Random, sampling: SamplingParams | None = None
) -> dict[str, Any]:
    """One instance: the question, both answers, the unique columns and the filter's verdict."""
    target = rng.randint(MIN_TARGET_ROWS, MAX_TARGET_ROWS)
    ask = QUERY_PROMPT.format(
        table_id=table.id, topic=table.topic, columns=", ".join(table.header), target_rows=target
    )
    question = _text(await generator.chat([{"role": "user", "content": ask}], None, sampling))
    answer = ANSWER_PROMPT.format(table_id=table.id, question=question)
    replies = await asyncio.gather(
        *(generator.chat([{"role": "user", "content": answer}], None, _nth(sampling, k)) for k in range(2))
    )
    first, second = (_table_block(_text(r)) for r in replies)
    verdict, unique = judge_pair(first, second)
    return {
        "id": re.sub(r"[^A-Za-z0-9_.-]+", "-", f"wide-{table.id}"),
        "source": table.id,
        "target_rows": target,
        "question": question,
        "answer": first,
        "second_answer": second,
        "unique_columns": unique,
        "agreement": verdict.agreement,
        "rows": verdict.rows,
        "kept": verdict.kept,
        "reason": verdict.reason,
    }


def _nth(sampling: SamplingParams | None, k: int) -> SamplingParams:
    """The k-th independent answer: its own seed (sampling at temperature 1 unless set)."""
    base = sampling or SamplingParams(temperature=1.0)
    return SamplingParams(**{**base.__dict__, "seed": (base.seed or 0) * 2 + k})


async def build_wide_data(
    tables: Sequence[SourceTable], generator: Any, *, seed: int = 0, concurrency: int = 8
) -> list[dict[str, Any]]:
    """Every table through the pipeline, in order (one rng per table, drawn from `seed`)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int, table: SourceTable) -> dict[str, Any]:
        async with sem:
            return await build_instance(table, generator, random.Random(seed * 1_000_003 + i))

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tables))))


def output_row(instance: Mapping[str, Any]) -> dict[str, Any]:
    """A kept instance as written: the seed's three fields, plus what a questions file needs."""
    return {
        "id": instance["id"],
        "question": instance["question"],
        "answer": instance["answer"],
        "unique_columns": instance["unique_columns"],
        "golden_answers": [instance["answer"]],
    }


def retention_report(instances: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Generated, kept, the share kept (beside the seed's 73.28%) and why the rest were dropped."""
    kept = sum(1 for i in instances if i["kept"])
    return {
        "generated": len(instances),
        "kept": kept,
        "retained": kept / len(instances) if instances else 0.0,
        "seed_retained": SEED_RETENTION,
        "dropped": dict(Counter(i["reason"] for i in instances if not i["kept"])),
        "min_agreement": MIN_AGREEMENT,
        "min_rows": MIN_ROWS,
        "target_rows": [MIN_TARGET_ROWS, MAX_TARGET_ROWS],
    }
