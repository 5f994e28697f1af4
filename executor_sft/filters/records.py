"""Read-only views of the episode fields the filter needs.

The filter works on plain dicts (or `executor_sft.schema` models) so records written by other
tools in the v1 format pass through: only the fields below are read, extra fields are ignored,
and optional ones may be missing. A required field that is missing or of the wrong type raises
`RecordError` naming the record (file:line) and the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from executor_sft.errors import UserError
from executor_sft.schema import Message

_MISSING = object()


class RecordError(UserError, ValueError):
    """A record lacks a field the filter needs (or has it with the wrong type)."""

    def __init__(self, where: str, field_path: str, problem: str):
        self.where = where
        self.field = field_path
        self.problem = problem
        super().__init__(f"{where}: field '{field_path}' {problem}")


def as_dict(record: Any) -> Mapping[str, Any]:
    """Accept a dict or a pydantic record (`Episode`, `ExecutorRun`) and return a mapping."""
    if isinstance(record, BaseModel):
        return record.model_dump(mode="json", by_alias=True)
    if isinstance(record, Mapping):
        return record
    raise TypeError(f"expected a dict or a pydantic record, got {type(record).__name__}")


def _get(d: Mapping[str, Any], key: str, where: str, path: str, required: bool = True) -> Any:
    value = d.get(key, _MISSING)
    if value is _MISSING and required:
        raise RecordError(where, path, "is missing")
    return value


def _int(value: Any, where: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(where, path, f"must be an integer, got {value!r}")
    return value


def _str(value: Any, where: str, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise RecordError(where, path, f"must be a string, got {value!r}")


@dataclass(frozen=True)
class RunView:
    """The fields of one ExecutorRun that filtering reads."""

    run_id: str
    role: str
    round: int
    sub_query_index: int
    n_searches: int
    finish: str
    has_outcome: bool
    em: float
    judge: bool | None
    counterfactual_of: str | None
    messages: list[Message] | None
    n_corrections: int | None = None
    """Corrective messages the runtime sent, when the writer records it (optional field)."""
    path: str = "run"
    """Field path of this run inside its record, e.g. `runs[3]` (for error messages)."""

    @property
    def sub_query_key(self) -> tuple[int, int]:
        """(round, sub_query_index): with the episode id, the identity of a sub-query."""
        return (self.round, self.sub_query_index)

    @classmethod
    def parse(cls, run: Any, where: str = "<run>", path: str = "run") -> RunView:
        d = as_dict(run)
        run_id = _str(_get(d, "run_id", where, f"{path}.run_id"), where, f"{path}.run_id")
        role = _str(_get(d, "role", where, f"{path}.role"), where, f"{path}.role")
        round_ = _int(_get(d, "round", where, f"{path}.round"), where, f"{path}.round")
        sqi = _int(
            _get(d, "sub_query_index", where, f"{path}.sub_query_index"), where, f"{path}.sub_query_index"
        )
        finish = _str(_get(d, "finish", where, f"{path}.finish"), where, f"{path}.finish")
        n = _get(d, "n_searches", where, f"{path}.n_searches", required=False)
        if n is _MISSING or n is None:
            searches = d.get("searches")
            if not isinstance(searches, list):
                raise RecordError(where, f"{path}.n_searches", "is missing (and no 'searches' list to count)")
            n = len(searches)
        outcome = d.get("outcome")
        if outcome is not None and not isinstance(outcome, Mapping):
            raise RecordError(where, f"{path}.outcome", f"must be an object or null, got {outcome!r}")
        em_raw = (outcome or {}).get("em")
        if em_raw is not None and not isinstance(em_raw, int | float):
            raise RecordError(where, f"{path}.outcome.em", f"must be a number, got {em_raw!r}")
        judge = (outcome or {}).get("judge")
        if judge is not None and not isinstance(judge, bool):
            raise RecordError(where, f"{path}.outcome.judge", f"must be true, false or null, got {judge!r}")
        cf = d.get("counterfactual_of")
        messages = d.get("messages")
        if messages is not None and not isinstance(messages, list):
            raise RecordError(where, f"{path}.messages", "must be a list of chat messages")
        corrections = d.get("n_corrections")
        if corrections is not None:
            corrections = _int(corrections, where, f"{path}.n_corrections")
        return cls(
            run_id=run_id,
            role=role,
            round=round_,
            sub_query_index=sqi,
            n_searches=_int(n, where, f"{path}.n_searches"),
            finish=finish,
            has_outcome=outcome is not None,
            em=float(em_raw or 0.0),
            judge=judge,
            counterfactual_of=None if cf is None else _str(cf, where, f"{path}.counterfactual_of"),
            messages=messages,
            n_corrections=corrections,
            path=path,
        )


@dataclass(frozen=True)
class EpisodeView:
    """The fields of one episode record that filtering reads."""

    episode_id: str
    question_id: str
    dataset: str
    runs: list[RunView] = field(default_factory=list)
    where: str = "<episode>"

    @classmethod
    def parse(cls, episode: Any, where: str = "<episode>") -> EpisodeView:
        d = as_dict(episode)
        episode_id = _str(_get(d, "episode_id", where, "episode_id"), where, "episode_id")
        question = _get(d, "question", where, "question")
        if not isinstance(question, Mapping):
            raise RecordError(where, "question", f"must be an object, got {question!r}")
        question_id = _str(_get(question, "id", where, "question.id"), where, "question.id")
        dataset = question.get("dataset")
        runs = _get(d, "runs", where, "runs")
        if not isinstance(runs, list):
            raise RecordError(where, "runs", "must be a list")
        views = []
        for i, run in enumerate(runs):
            if not isinstance(run, Mapping | BaseModel):
                raise RecordError(where, f"runs[{i}]", "must be an object")
            views.append(RunView.parse(run, where, f"runs[{i}]"))
        return cls(
            episode_id=episode_id,
            question_id=question_id,
            dataset="unknown" if dataset is None else _str(dataset, where, "question.dataset"),
            runs=views,
            where=where,
        )
