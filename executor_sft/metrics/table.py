"""Table answers: Markdown parsing and WideSearch's item F1, row F1 and success rate.

WideSeek-R1 (arXiv 2602.04634; seed summary, App. C.1 "Evaluation Metrics" and "Data
Format", Sec. 4 and App. E.1) scores a broad task's Markdown table against the gold table
with three numbers: item F1 over cells, row F1 over whole rows and success over the whole
table, with predicted rows aligned to gold rows by the task's `unique_columns`, so row order
does not matter. It reports Avg@4 and Max@4 of the two F1s and Avg@4 and Pass@4 of success.

The text leaves these choices open; this module makes them (docs/wide.md, "Table metrics"):
- Cells are compared after the EM normalisation (`normalize_answer`): case, punctuation,
  articles and whitespace never matter, so "1,204" equals "1204".
- Headers are matched by their normalised text. A predicted column that is not a gold
  column is ignored; a gold column the prediction lacks leaves all its cells missing.
- A row's key is its normalised unique-column cells. A predicted row is aligned with the gold
  row of the same key; a predicted row with an empty key part, a key no gold row has, or a key
  an earlier predicted row already took is unaligned and earns nothing (it still counts as
  predicted, so repeating a row lowers precision).
- Items are cells, key cells included. Gold items: the non-empty gold cells. Predicted items:
  the non-empty predicted cells under gold columns. A correct item is a predicted cell of an
  aligned row equal to its gold cell.
- A correct row is an aligned row whose every non-empty gold cell is matched. Row precision
  divides by every predicted row, row recall by every gold row.
- Success is 1 when the prediction has exactly the gold rows, each correct (row precision and
  row recall both 1).
- A prediction without a parsable table predicts nothing: every score is 0. The first table in
  the text is read (a block of `|` lines whose second line is the `---` separator, or the
  first block of `|` lines when no separator follows); `\\|` inside a cell is not supported.
- A gold table must parse, have rows, contain every unique column and have distinct keys:
  otherwise it is a data error (`ValueError`).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from executor_sft.metrics.answer import Normalization, normalize_answer

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
        if _is_separator(cells):
            continue
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


def _f1(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def _gold_table(gold_markdown: str, unique_columns: Sequence[str], normalization: Normalization):
    gold = parse_markdown_table(gold_markdown)
    if gold is None or not gold.rows:
        raise ValueError(f"gold answer is not a Markdown table with rows: {gold_markdown[:80]!r}")
    columns = [normalize_answer(h, normalization) for h in gold.header]
    keys = [normalize_answer(c, normalization) for c in unique_columns]
    missing = [c for c, k in zip(unique_columns, keys, strict=True) if k not in columns]
    if not keys or missing:
        raise ValueError(f"unique_columns {list(unique_columns)} must name gold columns {gold.header}")
    key_at = [columns.index(k) for k in keys]
    rows: dict[tuple[str, ...], list[str]] = {}
    for row in gold.rows:
        cells = [normalize_answer(c, normalization) for c in row]
        key = tuple(cells[i] for i in key_at)
        if key in rows:
            raise ValueError(f"gold table repeats the key {key} of unique_columns {list(unique_columns)}")
        rows[key] = cells
    return columns, key_at, rows


def table_scores(
    prediction_markdown: str | None,
    gold_markdown: str,
    unique_columns: Sequence[str],
    normalization: Normalization = "squad",
) -> TableScores:
    """Item, row and table scores of a predicted Markdown table (the rules in the module docstring)."""
    columns, key_at, gold_rows = _gold_table(gold_markdown, unique_columns, normalization)
    gold_items = sum(1 for cells in gold_rows.values() for c in cells if c)
    predicted = parse_markdown_table(prediction_markdown)
    if predicted is None:
        return TableScores(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    pred_columns = [normalize_answer(h, normalization) for h in predicted.header]
    # Gold column index -> predicted column index (the first predicted column of that name).
    source = {g: pred_columns.index(name) for g, name in enumerate(columns) if name in pred_columns}
    predicted_items = correct_items = correct_rows = 0
    taken: set[tuple[str, ...]] = set()
    for row in predicted.rows:
        cells = {g: normalize_answer(row[p], normalization) for g, p in source.items()}
        predicted_items += sum(1 for c in cells.values() if c)
        key = tuple(cells.get(i, "") for i in key_at)
        gold = gold_rows.get(key) if all(key) and key not in taken else None
        if gold is None:
            continue
        taken.add(key)
        matched = [g for g, c in cells.items() if c and c == gold[g]]
        correct_items += len(matched)
        if all(g in matched for g, c in enumerate(gold) if c):
            correct_rows += 1
    item_p, item_r, item_f1 = _f1(correct_items, predicted_items, gold_items)
    row_p, row_r, row_f1 = _f1(correct_rows, len(predicted.rows), len(gold_rows))
    success = 1.0 if row_p == 1.0 and row_r == 1.0 else 0.0
    return TableScores(item_p, item_r, item_f1, row_p, row_r, row_f1, success)


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
