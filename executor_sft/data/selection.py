"""Which questions a run uses: `QuestionSource` (one file and how to subset it) and `select_questions`.

Collection (`executor_sft.rollout`) and evaluation (`executor_sft.eval`) read the same
`questions:` mapping; only two defaults differ with the purpose. The defaults here are
evaluation's (`EvalConfig.questions` uses this class as it is); collection's config declares
its own in a subclass (`executor_sft.rollout.CollectQuestionSource`):

| field | evaluation | collection for training |
|---|---|---|
| `duplicates` | "keep" (ours: every row of the shared split, so its 3,869 instances as counted in Sec. 4.1; repeats get ids `<id>~<n>`) | "drop" (a repeat adds no new trajectory; dropped with a warning) |
| `limit_per` | "dataset" (at most `limit` per dataset label) | "source" (the first `limit` rows of the file) |
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from executor_sft.errors import InputError
from executor_sft.data.idlist import read_ids
from executor_sft.data.questions import Duplicates, load_questions, questions_file_problem
from executor_sft.schema import Question

LimitPer = Literal["dataset", "source"]
Formats = Literal["text", "table", "hybrid"]


def interleave_formats(questions: Sequence[Question]) -> list[Question]:
    """Text and table questions alternating (text first), each kind in file order, the longer kind's
    rest at the end: any 2n consecutive questions hold n of each while both last, as WideSeek-R1's
    hybrid batches of 64 deep and 64 wide samples do (seed summary, App. D "Data Mixing")."""
    deep = [q for q in questions if q.answer_format == "text"]
    wide = [q for q in questions if q.answer_format == "table"]
    mixed = [q for pair in zip(deep, wide, strict=False) for q in pair]
    n = min(len(deep), len(wide))
    return mixed + deep[n:] + wide[n:]


class QuestionSource(BaseModel):
    """One question file (anything `load_questions` reads: local file or Hub name) and how to subset it.

    Filters apply in this order: `split`, `datasets`, `ids_file`, `formats`, then `limit`. The defaults
    here are evaluation's; collection's config declares `duplicates="drop"` and
    `limit_per="source"` (module docstring).
    """

    model_config = ConfigDict(extra="forbid")
    path: str
    """Any file or Hub name `executor_sft.data.load_questions` reads."""
    split: str | None = None
    """Local files: keep rows whose `split` field equals this (e.g. `train` in minibench).
    Hub datasets: the split to load."""
    datasets: list[str] | None = None
    """Keep only these dataset labels."""
    limit: int | None = Field(None, ge=1)
    """At most this many questions (file order) after filtering, counted per `limit_per`."""
    limit_per: LimitPer = "dataset"
    """"dataset": `limit` per dataset label; "source": `limit` for the whole source."""
    dataset: str | None = None
    """Label for rows that carry no dataset field (default: the file stem)."""
    duplicates: Duplicates = "keep"
    """Repeated ids: "keep" (distinct ids `<id>~<n>`; ours, so the shared split keeps its 3,869 rows) or "drop"
    (keep the first of each id, with a warning)."""
    formats: Formats | None = Field(None, exclude_if=lambda value: value is None)
    """Keep only "text" questions (deep) or "table" ones (wide tasks, `Question.unique_columns`), or
    "hybrid": both, alternating (`interleave_formats`), so `limit: 128` takes 64 of each where the
    file has them. None: every question in file order."""
    ids_file: str | None = None
    """An evaluation set (`eval_set.json` from recipes/build_eval_set.py, or one id per line):
    use exactly these ids of this file, so every cell scores the same questions."""

    def preflight(self) -> list[tuple[str, str]]:
        """A local questions file or evaluation set that is not there (`executor_sft.preflight`)."""
        problems = [("path", problem)] if (problem := questions_file_problem(self.path)) else []
        if self.ids_file is not None and not Path(self.ids_file).is_file():
            problems.append(
                ("ids_file", f"{self.ids_file}: no such file; build it with recipes/build_eval_set.py")
            )
        return problems

    def endpoints(self) -> list[tuple[str, str]]:
        return []


def _restrict_to_ids(questions: list[Question], src: QuestionSource) -> list[Question]:
    """Exactly the evaluation set's ids (in the question file's order); every id must be found."""
    assert src.ids_file is not None
    wanted = read_ids(src.ids_file)
    present = {q.id for q in questions}
    missing = [i for i in wanted if i not in present]
    if missing:
        raise InputError(
            f"{src.ids_file}: {len(missing)} id(s) not in {src.path} after filtering (e.g. {missing[0]!r}); "
            "build the evaluation set from the same question source (path, split, datasets, duplicates)"
        )
    keep = set(wanted)
    return [q for q in questions if q.id in keep]


def select_questions(sources: QuestionSource | Sequence[QuestionSource]) -> list[Question]:
    """Questions from every source: filtered by split and dataset, restricted to the evaluation
    set's ids when `ids_file` is given, then `limit` (per dataset or per source).

    An id met in an earlier source is not repeated. A source with no question left after
    filtering is an error (a typo in `split` or `datasets`, an empty file).
    """
    if isinstance(sources, QuestionSource):
        sources = [sources]
    out: list[Question] = []
    seen: set[str] = set()
    for src in sources:
        path = Path(src.path)
        hub_split = src.split if not path.exists() else None
        questions = load_questions(src.path, split=hub_split, dataset=src.dataset, duplicates=src.duplicates)
        if src.split is not None and path.exists():
            questions = [q for q in questions if q.split == src.split]
        if src.datasets is not None:
            questions = [q for q in questions if q.dataset in src.datasets]
        if src.ids_file is not None:
            questions = _restrict_to_ids(questions, src)
        if src.formats == "hybrid":
            questions = interleave_formats(questions)
        elif src.formats is not None:
            questions = [q for q in questions if q.answer_format == src.formats]
        counted: Counter[str] = Counter()
        for q in questions:
            key = q.dataset if src.limit_per == "dataset" else ""
            if src.limit is not None and counted[key] >= src.limit:
                continue
            if q.id in seen:
                continue
            counted[key] += 1
            seen.add(q.id)
            out.append(q)
        if not counted:
            raise InputError(
                f"{src.path}: no questions left after filtering (split={src.split}, datasets={src.datasets}"
                f"{f', formats={src.formats}' if src.formats else ''})"
            )
    return out
