"""Load question sets of every format the field uses into one `Question` type.

Accepted row shapes (JSONL, JSON list, or parquet; or a Hugging Face dataset):
- FlashRAG: `{"id", "question", "golden_answers": [...]}`;
- answer-keyed rows, the shape of the shared `seed_splits/*.jsonl` (the paper gives no row
  format): `{"id"?, "question", "answer": str}` or `"answers": [...]`;
- Search-R1 parquet: `{"question" | "prompt", "reward_model": {"ground_truth": {"target": [...]}},
  "data_source", "extra_info": {"index"}}`.

Ids: the row's `id`, else the set's own index (`extra_info.index`, `index`, prefixed by the row's dataset), else
`<file stem>-<row number>`; all stable across runs.

Repeated ids (`duplicates=`): "drop" keeps the first row of each id and warns (collection for
training: a repeat adds no new trajectory); "keep" keeps every row and gives the n-th repeat
of an id the id `<id>~<n>` (n = 2, 3, ... in file order, so stable), with `duplicate_of`
naming the original. Evaluation keeps them (ours): the shared 3,869-row test split holds 107
repeated MuSiQue rows, and keeping every row keeps the 3,869 instances Sec. 4.1 and App. E count.
The paper's text does not mention repeats.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from executor_sft.data.local_path import did_you_mean, names_a_local_file
from executor_sft.errors import UserError
from executor_sft.files import iter_records
from executor_sft.errors import MalformedLineError, MissingFileError
from executor_sft.metrics.table import ColumnRule, table_scores
from executor_sft.schema import Question

logger = logging.getLogger(__name__)

Duplicates = Literal["keep", "drop"]
REPEAT_SEP = "~"


class QuestionFormatError(UserError, ValueError):
    """A question row that cannot be read; the message names the file, the line and the field."""

    def __init__(self, source: str, line: int, field: str, problem: str):
        self.source, self.line, self.field = source, line, field
        super().__init__(f"{source}:{line}: field '{field}': {problem}")


def _listify(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _golden_answers(row: dict[str, Any]) -> tuple[str, list[str]] | None:
    """Return (field name, answers) from whichever answer field the row carries."""
    for key in ("golden_answers", "answers", "answer"):
        if row.get(key) is not None:
            return key, _listify(row[key]) or []
    ground_truth = (row.get("reward_model") or {}).get("ground_truth")
    if isinstance(ground_truth, dict) and ground_truth.get("target") is not None:
        return "reward_model.ground_truth.target", _listify(ground_truth["target"]) or []
    if ground_truth is not None:
        return "reward_model.ground_truth", _listify(ground_truth) or []
    return None


def _question_text(row: dict[str, Any]) -> Any:
    if row.get("question") is not None:
        return row["question"]
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        return prompt
    messages = _listify(prompt)
    if messages:
        users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return users[-1]
    return None


def _row_id(row: dict[str, Any], stem: str, row_number: int) -> str:
    if row.get("id") not in (None, ""):
        return str(row["id"])
    extra = row.get("extra_info") or {}
    for index in (extra.get("index") if isinstance(extra, dict) else None, row.get("index")):
        if index is not None:
            # Mixed sets number rows per source dataset, so the index alone is not unique.
            source = row.get("dataset") or row.get("data_source")
            return f"{stem}-{source}-{index}" if source else f"{stem}-{index}"
    return f"{stem}-{row_number}"


def normalize_row(row: dict[str, Any], source: str, line: int, stem: str, default_dataset: str) -> Question:
    """Turn one raw row into a `Question`, or raise `QuestionFormatError`."""
    if not isinstance(row, dict):
        raise QuestionFormatError(source, line, "<row>", f"expected a JSON object, got {type(row).__name__}")
    question = _question_text(row)
    if not isinstance(question, str) or not question.strip():
        raise QuestionFormatError(source, line, "question", "missing or not a non-empty string")
    found = _golden_answers(row)
    if found is None:
        raise QuestionFormatError(
            source, line, "golden_answers", "no answer field (expected golden_answers, answers or answer)"
        )
    field, answers = found
    if not answers or not all(isinstance(a, (str, int, float)) for a in answers):
        raise QuestionFormatError(source, line, field, "must be a non-empty string or list of strings")
    positives = _listify(row.get("positive_doc_ids"))
    dataset = row.get("dataset") or row.get("data_source") or default_dataset
    extras = {
        k: v
        for k, v in row.items()
        if k in ("split", "type", "decomposition", "alt_positive_doc_ids", "unique_columns", "column_rules")
        and v is not None
    }
    if "column_rules" in extras and "unique_columns" not in extras:
        raise QuestionFormatError(
            source, line, "column_rules", "only a table question (unique_columns) has them"
        )
    if "unique_columns" in extras:
        _check_table(source, line, extras["unique_columns"], answers, extras.get("column_rules"))
    if "decomposition" in extras:
        extras["decomposition"] = _listify(extras["decomposition"])
    return Question(
        id=_row_id(row, stem, line),
        question=question.strip(),
        golden_answers=[str(a) for a in answers],
        dataset=str(dataset),
        positive_doc_ids=[str(p) for p in positives] if positives else None,
        **extras,
    )


def _check_table(source: str, line: int, unique_columns: Any, answers: list, rules: Any = None) -> None:
    """A table question: `unique_columns` names columns of the one gold Markdown table, whose keys are
    distinct; `column_rules`, when given, maps gold columns to valid `ColumnRule`s."""
    if (
        not isinstance(unique_columns, list)
        or not unique_columns
        or not all(isinstance(c, str) for c in unique_columns)
    ):
        raise QuestionFormatError(source, line, "unique_columns", "must be a non-empty list of column names")
    if len(answers) != 1:
        raise QuestionFormatError(
            source, line, "golden_answers", "a table question has one gold Markdown table"
        )
    if rules is not None and not isinstance(rules, dict):
        raise QuestionFormatError(source, line, "column_rules", "must map column names to rules")
    for rule in (rules or {}).values():
        try:
            ColumnRule.from_dict(rule)
        except ValueError as e:
            raise QuestionFormatError(source, line, "column_rules", str(e)) from None
    try:
        table_scores(str(answers[0]), str(answers[0]), unique_columns, rules=rules)
    except ValueError as e:
        field = "column_rules" if str(e).startswith("column rules name") else "golden_answers"
        raise QuestionFormatError(source, line, field, str(e)) from None


def _iter_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line or row number, row) from a JSONL, JSON or parquet file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            problem = f"not a parquet file ({' '.join(str(exc).split())[:200]}); pass parquet, JSONL or JSON"
            raise QuestionFormatError(str(path), 1, "<file>", problem) from None
        yield from enumerate(table.to_pylist(), start=1)
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            problem = (
                f"not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
            )
            raise QuestionFormatError(str(path), 1, "<file>", problem) from None
        except json.JSONDecodeError as exc:
            raise QuestionFormatError(str(path), exc.lineno, "<json>", f"invalid JSON ({exc.msg})") from None
        if isinstance(data, dict) and "data" in data:
            data = data["data"]
        if not isinstance(data, list):
            raise QuestionFormatError(
                str(path), 1, "<file>", "a .json question file must hold a list of rows"
            )
        yield from enumerate(data, start=1)
    else:
        try:
            yield from iter_records(path, require_object=False)
        except MalformedLineError as exc:
            raise QuestionFormatError(exc.path, exc.line, "<json>", exc.problem) from None


def _dedupe(questions: list[Question], source: str) -> list[Question]:
    seen: set[str] = set()
    kept: list[Question] = []
    for q in questions:
        if q.id in seen:
            continue
        seen.add(q.id)
        kept.append(q)
    dropped = len(questions) - len(kept)
    if dropped:
        logger.warning("%s: dropped %d rows with duplicate ids (kept the first of each)", source, dropped)
    return kept


def _distinct_ids(questions: list[Question], source: str) -> list[Question]:
    """Keep every row; the n-th repeat of an id becomes `<id>~<n>` (skipping ids already taken)."""
    taken = {q.id for q in questions}
    seen: dict[str, int] = {}
    out: list[Question] = []
    for q in questions:
        count = seen.get(q.id, 0) + 1
        seen[q.id] = count
        if count == 1:
            out.append(q)
            continue
        new_id = f"{q.id}{REPEAT_SEP}{count}"
        while new_id in taken:
            new_id += REPEAT_SEP
        taken.add(new_id)
        out.append(q.model_copy(update={"id": new_id, "duplicate_of": q.id}))
    repeats = len(out) - len(seen)
    if repeats:
        logger.info("%s: kept %d repeated rows under distinct ids (<id>%s<n>)", source, repeats, REPEAT_SEP)
    return out


def questions_file_problem(path_or_name: str | Path) -> str | None:
    """What to do about a questions path that names a local file that is not there (else None)."""
    path = Path(path_or_name)
    if path.exists() or not names_a_local_file(path_or_name):
        return None
    return (
        f"{path}: questions file not found{did_you_mean(path)}; check the path (relative paths start "
        "where the command runs: the repository root), or write a Hub dataset as hf://org/name"
    )


def load_questions(
    path_or_name: str | Path,
    split: str | None = None,
    limit: int | None = None,
    dataset: str | None = None,
    duplicates: Duplicates = "drop",
) -> list[Question]:
    """Load a question set from a local file or a Hugging Face dataset.

    A Hub dataset is written `hf://<repo>[:<config>]` (or any name that is not a local path);
    `split` selects its split (default `test`). `dataset` overrides the dataset label when
    the rows carry none. `duplicates` says what repeated ids become (module docstring).
    """
    if duplicates not in ("keep", "drop"):
        raise ValueError(f"duplicates must be 'keep' or 'drop', got {duplicates!r}")
    path = Path(path_or_name)
    problem = questions_file_problem(path_or_name)
    if problem is not None:
        raise MissingFileError(problem)
    if path.exists():
        stem = path.stem
        label = dataset or stem
        questions = [normalize_row(row, str(path), i, stem, label) for i, row in _iter_rows(path)]
        source = str(path)
    else:
        name = str(path_or_name).removeprefix("hf://")
        repo, _, config = name.partition(":")
        from datasets import load_dataset

        ds = load_dataset(repo, config or None, split=split or "test")
        label = dataset or (config or repo.split("/")[-1])
        stem = f"{repo.split('/')[-1]}-{config or 'default'}-{split or 'test'}"
        questions = [normalize_row(dict(row), name, i, stem, label) for i, row in enumerate(ds, start=1)]
        source = name
    questions = _dedupe(questions, source) if duplicates == "drop" else _distinct_ids(questions, source)
    return questions[:limit] if limit is not None else questions
