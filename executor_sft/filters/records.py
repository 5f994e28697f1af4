"""The episode schema as the filter reads it: `executor_sft.schema` models, parsed leniently.

Records written by other tools in the v1 format pass through. The filter's models are the
schema's own, with three relaxations: extra fields are ignored; fields the filter never reads
(rounds, usage, call logs, ...) are taken as they are, so another writer's variant of them
cannot stop a filter run; and fields a writer may leave out get defaults (`sub_query`,
`model`, ...; `n_searches` is counted from `searches`; `messages` may be missing on a run that
is not kept). Fields the filter reads are validated strictly (`"0"` is not a round), and a
problem becomes one `RecordError` naming the record (file:line) and the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from executor_sft.errors import UserError
from executor_sft.schema import EPISODE_SCHEMA, Episode, ExecutorRun, Finish, Message, Outcome, Question

_READ_ONLY = ConfigDict(extra="ignore")


class RecordError(UserError, ValueError):
    """A record lacks a field the filter needs (or has it with the wrong type)."""

    def __init__(self, where: str, field_path: str, problem: str):
        self.where = where
        self.field = field_path
        self.problem = problem
        super().__init__(f"{where}: field '{field_path}' {problem}")


class FilterOutcome(Outcome):
    model_config = _READ_ONLY
    answerer_call: Any = None
    replay: Any = None


class FilterQuestion(Question):
    model_config = _READ_ONLY
    question: str = ""
    golden_answers: Any = None
    positive_doc_ids: Any = None


class FilterRun(ExecutorRun):
    """An `ExecutorRun` with what the filter reads: the correctness methods work unchanged."""

    model_config = _READ_ONLY
    sub_query: str = ""
    model: str = ""
    max_turns: int = 0
    max_searches: int = 0
    finish: Finish
    n_searches: int
    messages: list[Message] | None = None
    """None when the record has none: an error only for a run that becomes a row."""
    outcome: FilterOutcome | None = None
    searches: Any = None
    report: Any = None
    usage: Any = None
    calls: Any = None

    @model_validator(mode="before")
    @classmethod
    def _count_searches(cls, data: Any) -> Any:
        """Records without `n_searches` count their `searches` list."""
        if isinstance(data, Mapping) and data.get("n_searches") is None:
            searches = data.get("searches")
            if isinstance(searches, list):
                return {**data, "n_searches": len(searches)}
        return data


class FilterEpisode(Episode):
    """An `Episode` as the filter reads it: the question's id and dataset, and the runs."""

    model_config = _READ_ONLY
    question: FilterQuestion
    runs: list[FilterRun]
    config: Any = None
    rounds: Any = None
    metrics: Any = None
    usage: Any = None
    stop_reason: Any = None
    answerer: Any = None


_EXPECTED = {
    "int_type": "an integer",
    "string_type": "a string",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


_READ_ORDER = {
    name: i
    for i, name in enumerate(
        ("schema", "episode_id", "question", "id", "dataset", "runs", "run_id", "role", "round")
        + ("sub_query_index", "finish", "n_searches", "outcome", "em", "judge", "counterfactual_of")
        + ("messages", "n_corrections")
    )
}
"""Of several problems, the one reported is the first in this order (then pydantic's)."""


def _rank(loc: tuple[int | str, ...]) -> tuple[int, ...]:
    return tuple(part if isinstance(part, int) else _READ_ORDER.get(part, len(_READ_ORDER)) for part in loc)


def _nullable(model: type[BaseModel], loc: tuple[int | str, ...]) -> bool:
    """Whether the field of `model` at pydantic's error location `loc` accepts null."""
    annotation: Any = model
    for part in loc:
        if isinstance(part, int):  # list[X] -> X
            annotation = next(iter(get_args(annotation)), None)
            continue
        inner = next(
            (
                a
                for a in (annotation, *get_args(annotation))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ),
            None,
        )
        if inner is None or part not in inner.model_fields:
            return False
        annotation = inner.model_fields[part].annotation
    return type(None) in get_args(annotation)


def _field_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else part
    return path


def _record_error(exc: ValidationError, where: str, model: type[BaseModel], prefix: str = "") -> RecordError:
    """The first problem of a failed `model` parse as a one-line `RecordError` (field path, what it must be)."""
    error = min(exc.errors(include_url=False), key=lambda e: _rank(tuple(e["loc"])))
    loc = tuple(error["loc"])
    path = _field_path(prefix, loc) or "<record>"
    kind = error["type"]
    if kind == "missing":
        if loc and loc[-1] == "n_searches":
            return RecordError(where, path, "is missing (and no 'searches' list to count)")
        return RecordError(where, path, "is missing")
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return RecordError(where, path, f"must be one of {expected}, got {error['input']!r}")
    expected = _EXPECTED.get(kind)
    if expected is None:
        return RecordError(where, path, f"{error['msg'].lower()}, got {error['input']!r}")
    if _nullable(model, loc):
        expected += " or null"
    return RecordError(where, path, f"must be {expected}, got {error['input']!r}")


def parse_episode(record: Any, where: str = "<episode>") -> Episode:
    """The episode a record holds; an `Episode` model is used as it is."""
    if isinstance(record, Episode):
        return record
    if not isinstance(record, Mapping):
        raise RecordError(where, "<record>", "must be a JSON object")
    schema = record.get("schema", EPISODE_SCHEMA)
    if schema != EPISODE_SCHEMA:
        raise RecordError(
            where, "schema", f"is {schema!r}; this version reads {EPISODE_SCHEMA!r} episodes only"
        )
    try:
        return FilterEpisode.model_validate(record, strict=True)
    except ValidationError as exc:
        raise _record_error(exc, where, FilterEpisode) from None


def parse_run(record: Any, where: str = "<run>", path: str = "run") -> ExecutorRun:
    """One run of a record (`path` names it in errors, e.g. `runs[3]`); an `ExecutorRun` as it is."""
    if isinstance(record, ExecutorRun):
        return record
    try:
        return FilterRun.model_validate(record, strict=True)
    except ValidationError as exc:
        raise _record_error(exc, where, FilterRun, path) from None
