"""Table answers: Markdown parsing and WideSearch's item F1, row F1 and success rate.

The definitions are those of WideSearch's official evaluator (ByteDance-Seed/WideSearch,
`src/evaluation/`), through which WideSeek-R1 scores its broad tasks (seed summary, App. C.1 and
E.1); `tests/metrics/test_table_widesearch.py` ports that evaluator and compares 400 generated
tables with it. Every rule, where ours differs from the peer's and why: docs/wide.md, "Table
metrics".
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

_SEPARATOR_CELL = re.compile(r"^:?-+:?$")


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    """Data rows, each padded or cut to the header's width."""


def _cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [c.strip() for c in body.split("|")]


def _is_separator(cells: list[str]) -> bool:
    return bool(cells) and all(_SEPARATOR_CELL.match(c.replace(" ", "")) for c in cells)


def parse_markdown_table(text: str | None) -> Table | None:
    """The first Markdown table in `text`, or None when there is none."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in (text or "").splitlines():
        if line.strip().startswith("|"):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    with_separator = [b for b in blocks if len(b) >= 2 and _is_separator(_cells(b[1]))]
    if with_separator:
        block = with_separator[0]
        header, body = _cells(block[0]), block[2:]
    elif blocks:
        header, body = _cells(blocks[0][0]), blocks[0][1:]
    else:
        return None
    width = len(header)
    rows = []
    for line in body:
        cells = _cells(line)
        if _is_separator(cells) or not any(cells):
            continue  # an all-blank row is no row (WideSearch's reader drops it too)
        rows.append((cells + [""] * width)[:width])
    return Table(header=header, rows=rows)


@dataclass(frozen=True)
class TableScores:
    item_precision: float
    item_recall: float
    item_f1: float
    row_precision: float
    row_recall: float
    row_f1: float
    success: float
    """1.0 when the whole table is right (every gold row, no other row), else 0.0."""


_ZERO = TableScores(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

Preprocess = Literal["norm_str", "extract_number", "none"]
Metric = Literal["exact_match", "number_near", "llm_judge"]
PREPROCESSES: tuple[str, ...] = ("norm_str", "extract_number", "none")
METRICS: tuple[str, ...] = ("exact_match", "number_near", "llm_judge")


@dataclass(frozen=True)
class ColumnRule:
    """How one column's cells are compared (WideSearch's per-column `preprocess` and `metric`)."""

    metric: Metric = "exact_match"
    preprocess: Preprocess = "norm_str"
    criterion: float | str | None = None
    """`number_near`: the relative tolerance (0 = the same value); `llm_judge`: the grading
    criterion shown to the judge; unused by `exact_match`."""

    @classmethod
    def from_dict(cls, value: Any) -> ColumnRule:
        """A rule from config/question data: `{metric, preprocess?, criterion?}` (ValueError if bad)."""
        if isinstance(value, ColumnRule):
            return value
        if not isinstance(value, Mapping) or set(value) - {"metric", "preprocess", "criterion"}:
            raise ValueError(f"a column rule is a mapping of metric, preprocess and criterion, got {value!r}")
        metric = value.get("metric", "exact_match")
        if metric not in METRICS:
            raise ValueError(f"column metric {metric!r} is not one of {', '.join(METRICS)}")
        default = (
            "extract_number" if metric == "number_near" else "none" if metric == "llm_judge" else "norm_str"
        )
        preprocess = value.get("preprocess", default)
        if preprocess not in PREPROCESSES:
            raise ValueError(f"column preprocess {preprocess!r} is not one of {', '.join(PREPROCESSES)}")
        criterion = value.get("criterion")
        if metric == "number_near":
            if criterion is None:
                criterion = 0.0
            if isinstance(criterion, bool) or not isinstance(criterion, int | float) or criterion < 0:
                raise ValueError(f"number_near's criterion is a tolerance >= 0, got {criterion!r}")
            criterion = float(criterion)
        elif criterion is not None and not isinstance(criterion, str):
            raise ValueError(f"{metric}'s criterion is a text, got {criterion!r}")
        return cls(metric=metric, preprocess=preprocess, criterion=criterion)


TEXT_RULE = ColumnRule()
NUMBER_RULE = ColumnRule(metric="number_near", preprocess="extract_number", criterion=0.0)

_NUMBER = re.compile(r"[-+]?(?:\d*\.\d+|\d+\.?\d*)%?")


def norm_column(name: str) -> str:
    """A header as WideSearch compares headers: stripped, lower-cased, without spaces."""
    return name.strip().lower().replace(" ", "")


def norm_str(cell: str) -> str:
    """WideSearch's `norm_str`: lower-cased, stripped, without spaces and `*`."""
    return cell.lower().strip().replace(" ", "").replace("*", "")


def extract_number(cell: str) -> str:
    """WideSearch's `extract_number`: the first number (sign, decimals, %) once commas are gone, else "NULL"."""
    found = _NUMBER.search(cell.replace(",", ""))
    return found.group(0) if found else "NULL"


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace("%", "")) / 100.0 if "%" in text else float(text)
    except ValueError:
        return None


def number_near(prediction: str, gold: str, criterion: float) -> float:
    """1.0 when both parse and |pred - gold| <= |gold| x criterion, or neither parses and they are equal."""
    p, g = _as_number(prediction), _as_number(gold)
    if p is None or g is None:
        return 1.0 if p is None and g is None and prediction == gold else 0.0
    return 1.0 if abs(p - g) <= abs(g) * criterion else 0.0


BLANK = "nan"
"""What a blank cell reads as: WideSearch reads tables with pandas, where a blank cell is NaN and
`astype(str)` makes it "nan"; so a blank cell matches a blank one and "**" does not match it."""


def _cell(text: str) -> str:
    return text if text.strip() else BLANK


def _preprocess(cell: str, how: str) -> str:
    if how == "norm_str":
        return norm_str(cell)
    if how == "extract_number":
        return extract_number(cell)
    return cell


def _is_number_cell(cell: str) -> bool:
    return bool(_NUMBER.fullmatch(cell.replace(",", "").strip()))


def infer_rules(header: Sequence[str], rows: Sequence[Sequence[str]]) -> dict[str, ColumnRule]:
    """The default rule of each (normalised) gold column: a number column when every non-blank
    gold cell is a number, else a text column."""
    rules = {}
    for i, name in enumerate(header):
        cells = [r[i].strip() for r in rows if r[i].strip()]
        rules[name] = NUMBER_RULE if cells and all(_is_number_cell(c) for c in cells) else TEXT_RULE
    return rules


CellJudge = Callable[[str, str, str], float | None]
"""(normalised column, predicted cell, gold cell) -> 1.0 / 0.0 (None counts as 0)."""


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 1e-9 else 0.0


@dataclass(frozen=True)
class _Gold:
    columns: list[str]
    key_at: list[int]
    rules: list[ColumnRule]
    rows: dict[tuple[str, ...], list[str]]
    """Preprocessed key -> the gold row's raw cells (in `columns` order)."""


def _gold_table(gold_markdown: str, unique_columns: Sequence[str], rules: Mapping[str, Any] | None) -> _Gold:
    gold = parse_markdown_table(gold_markdown)
    if gold is None or not gold.rows:
        raise ValueError(f"gold answer is not a Markdown table with rows: {gold_markdown[:80]!r}")
    columns = [norm_column(h) for h in gold.header]
    if "" in columns or len(set(columns)) != len(columns):
        raise ValueError(f"gold table needs distinct, non-empty column names, got {gold.header}")
    keys = [norm_column(c) for c in unique_columns]
    missing = [c for c, k in zip(unique_columns, keys, strict=True) if k not in columns]
    if not keys or missing:
        raise ValueError(f"unique_columns {list(unique_columns)} must name gold columns {gold.header}")
    given = {norm_column(name): ColumnRule.from_dict(rule) for name, rule in (rules or {}).items()}
    unknown = sorted(set(given) - set(columns))
    if unknown:
        raise ValueError(f"column rules name {unknown}, which are not gold columns {gold.header}")
    inferred = infer_rules(columns, gold.rows)
    column_rules = [given.get(c, inferred[c]) for c in columns]
    key_at = [columns.index(k) for k in keys]
    rows: dict[tuple[str, ...], list[str]] = {}
    for row in gold.rows:
        cells = [_cell(c) for c in row]
        key = tuple(_preprocess(cells[i], column_rules[i].preprocess) for i in key_at)
        if key in rows:
            raise ValueError(f"gold table repeats the key {key} of unique_columns {list(unique_columns)}")
        rows[key] = cells
    return _Gold(columns, key_at, column_rules, rows)


def _cell_score(rule: ColumnRule, column: str, pred: str, gold: str, judge: CellJudge | None) -> float:
    p, g = _preprocess(pred, rule.preprocess), _preprocess(gold, rule.preprocess)
    if rule.metric == "number_near":
        return number_near(p, g, float(rule.criterion or 0.0))
    if rule.metric == "llm_judge" and judge is not None:
        verdict = judge(column, p, g)
        return 1.0 if verdict is not None and float(verdict) >= 1.0 else 0.0
    # exact_match, and an llm_judge column scored without a judge: case-insensitive equality.
    return 1.0 if p.lower() == g.lower() else 0.0


def table_scores(
    prediction_markdown: str | None,
    gold_markdown: str,
    unique_columns: Sequence[str],
    *,
    rules: Mapping[str, Any] | None = None,
    judge: CellJudge | None = None,
) -> TableScores:
    """Item, row and table scores of a predicted Markdown table (the rules in the module docstring).

    `rules` maps column names to `ColumnRule`s (or their dicts); a column without one gets the
    inferred rule. `judge` scores the cells of `llm_judge` columns (`judged_table_scores` builds
    one from an `LLMJudge`); without it those columns are compared like `exact_match`.
    """
    gold = _gold_table(gold_markdown, unique_columns, rules)
    predicted = parse_markdown_table(prediction_markdown)
    if predicted is None:
        return _ZERO
    named = [(i, norm_column(h)) for i, h in enumerate(predicted.header)]
    named = [(i, h) for i, h in named if h]  # an unnamed column is dropped, as pandas' "Unnamed" ones are
    names = [h for _, h in named]
    if len(set(names)) != len(names) or set(names) != set(gold.columns):
        return _ZERO
    at = {h: i for i, h in named}
    source = [at[c] for c in gold.columns]
    raw_seen: set[tuple[str, ...]] = set()
    key_seen: set[tuple[str, ...]] = set()
    kept: list[tuple[tuple[str, ...] | None, list[str]]] = []
    for row in predicted.rows:
        cells = [_cell(row[s]) for s in source]
        raw = tuple(cells[i] for i in gold.key_at)
        if raw in raw_seen:
            continue
        raw_seen.add(raw)
        key = tuple(_preprocess(cells[i], gold.rules[i].preprocess) for i in gold.key_at)
        # A key that repeats only after preprocessing still counts as a predicted row, but only its
        # first row can align (the peer aligns both with one gold row: recall above 1).
        kept.append((None if key in key_seen else key, cells))
        key_seen.add(key)
    width = len(gold.columns)
    tp_items = tp_rows = 0.0
    identical = len(kept) == len(gold.rows)
    for key, cells in kept:
        target = gold.rows.get(key) if key is not None else None
        if target is None:
            identical = False
            continue
        scores = [
            1.0 if i in gold.key_at else _cell_score(rule, gold.columns[i], cells[i], target[i], judge)
            for i, rule in enumerate(gold.rules)
        ]
        tp_items += sum(scores)
        tp_rows += min(scores)
        identical = identical and all(
            _preprocess(c, r.preprocess) == _preprocess(t, r.preprocess)
            for c, t, r in zip(cells, target, gold.rules, strict=True)
        )
    n_pred, n_gold = len(kept), len(gold.rows)
    row_p = tp_rows / n_pred if n_pred else 0.0
    row_r = tp_rows / n_gold
    item_p = tp_items / (n_pred * width) if n_pred else 0.0
    item_r = tp_items / (n_gold * width)
    all_one = item_p == item_r == row_p == row_r == 1.0
    success = 1.0 if all_one or identical else 0.0
    return TableScores(item_p, item_r, _f1(item_p, item_r), row_p, row_r, _f1(row_p, row_r), success)


def judged_cells(
    prediction_markdown: str | None,
    gold_markdown: str,
    unique_columns: Sequence[str],
    *,
    rules: Mapping[str, Any] | None = None,
) -> list[tuple[str, str, str]]:
    """The (column, predicted cell, gold cell) pairs of aligned rows that an `llm_judge` column sends to a judge."""
    pairs: list[tuple[str, str, str]] = []

    def record(column: str, pred: str, gold: str) -> float:
        pairs.append((column, pred, gold))
        return 0.0

    table_scores(prediction_markdown, gold_markdown, unique_columns, rules=rules, judge=record)
    return pairs


async def judged_table_scores(
    prediction_markdown: str | None,
    gold_markdown: str,
    unique_columns: Sequence[str],
    judge: Any,
    *,
    rules: Mapping[str, Any],
    question: str = "",
) -> TableScores:
    """`table_scores` with each `llm_judge` cell judged by `judge` (an `executor_sft.metrics.judge.LLMJudge`).

    Ours: one verdict per cell through the project's judge (its prompt, cache and verdict parsing),
    where WideSearch's `llm_judge_column` grades a whole column in one call. The judge sees the
    question, the column and its criterion, the gold cell as the gold answer and the predicted cell.
    """
    import asyncio

    criteria = {norm_column(name): ColumnRule.from_dict(rule).criterion for name, rule in rules.items()}
    pairs = sorted(set(judged_cells(prediction_markdown, gold_markdown, unique_columns, rules=rules)))

    async def one(column: str, pred: str, gold: str):
        criterion = criteria.get(column) or "the response states the same fact as the target"
        prompt = f"{question}\nColumn: {column}\nGrading criterion: {criterion}".strip()
        return await judge.judge(prompt, [gold], pred)

    verdicts = await asyncio.gather(*(one(*p) for p in pairs))
    by_pair = {p: (1.0 if v else 0.0) for p, v in zip(pairs, verdicts, strict=True)}
    return table_scores(
        prediction_markdown,
        gold_markdown,
        unique_columns,
        rules=rules,
        judge=lambda c, p, g: by_pair.get((c, p, g), 0.0),
    )


def render_markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table (header, separator, one line per row), as gold answers are written."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class AtK:
    avg: float
    """Avg@k: the mean over questions of the mean over a question's samples."""
    max: float
    """Max@k: the mean over questions of the best sample's score."""
    pass_: float
    """Pass@k: the share of questions where some sample scores 1 (for success; for an F1, a perfect table)."""
    k: int
    n_questions: int


def at_k(scores: Iterable[tuple[str, float]]) -> AtK:
    """Avg@k, Max@k and Pass@k of `(question_id, score)` pairs, one pair per sample.

    `k` is the largest number of samples a question has; a question with fewer counts with
    the samples it has.
    """
    by_question: dict[str, list[float]] = defaultdict(list)
    for qid, score in scores:
        by_question[qid].append(float(score))
    if not by_question:
        return AtK(avg=0.0, max=0.0, pass_=0.0, k=0, n_questions=0)
    values = list(by_question.values())
    return AtK(
        avg=statistics.fmean(statistics.fmean(v) for v in values),
        max=statistics.fmean(max(v) for v in values),
        pass_=statistics.fmean(1.0 if max(v) >= 1.0 else 0.0 for v in values),
        k=max(len(v) for v in values),
        n_questions=len(values),
    )
