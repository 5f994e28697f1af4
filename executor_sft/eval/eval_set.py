"""Cut an evaluation set once from original questions, as the paper's App. E (Tab. 8), for every cell.

A reference delegation system (backbone, executor, answerer) runs once over the original
questions (`EvalSetConfig.questions`, else the base config's). A question is removed when its reference episodes all answered without dispatching
a single sub-query (such a question does not exercise the executor); an episode that ended
in an error is no evidence of that, so its question stays. Every later cell, single-agent
included, evaluates exactly the remaining ids (`questions[].ids_file`), so all cells of a
table score one identical question list.

Writes `<output_dir>/eval_set.json` (ids, excluded ids, per-dataset counts, source),
`<output_dir>/eval_set.md` (a table shaped like Tab. 8) and the reference run in
`<output_dir>/reference/` (resumable like any evaluation).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from executor_sft.configfile import load_config
from executor_sft.data.idlist import ids_digest
from executor_sft.data.selection import QuestionSource
from executor_sft.errors import InputError, UserError
from executor_sft.eval.aggregate import has_subquery
from executor_sft.eval.cells import cell_config, driver_pipeline, read_base
from executor_sft.eval.config import JUDGE_ROLE, EvalConfig
from executor_sft.eval.report import write_markdown
from executor_sft.eval.runner import run_eval, select_questions
from executor_sft.files import write_json
from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.pool import ModelPool
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import Episode

EVAL_SET_JSON = "eval_set.json"
EVAL_SET_MD = "eval_set.md"
RULE = "removed: every reference episode of the question answered without any sub-query"


class EvalSetConfig(BaseModel):
    """The reference delegation run that decides the evaluation set."""

    model_config = ConfigDict(extra="forbid")

    name: str = "eval-set"
    output_dir: str
    base: str | dict[str, Any]
    """An eval config (YAML path or mapping): its questions (without `ids_file`), pipeline and
    retriever are used; its name, output_dir, mode and samples are replaced."""
    questions: list[QuestionSource] | None = None
    """The original questions the set is cut from, in place of the base config's (e.g. the
    4,125 originals when the base evaluates an already-cut split)."""
    models: dict[str, ChatModelConfig] = Field(default_factory=dict)
    """The reference system's models by role, over the base config's (backbone, answerer, executor)."""
    samples: int = Field(1, ge=1)
    """Reference episodes per question; a question is removed only when all of them had no sub-query."""


@dataclass
class EvalSet:
    """The ids every cell evaluates, the ids removed, and Tab. 8-shaped counts per dataset."""

    name: str
    rule: str
    ids: list[str]
    excluded: list[str]
    counts: dict[str, dict[str, int]]
    """dataset -> {total, excluded, evaluated, kept_after_error}."""
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return ids_digest(self.ids)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "digest": self.digest}

    def markdown(self) -> str:
        """Per-dataset table: instances, removed (no sub-query), evaluated."""
        header = "| dataset | instances | no sub-query (removed) | evaluated |\n|---|---|---|---|"
        rows = [
            f"| {d} | {c['total']:,} | {c['excluded']:,} | {c['evaluated']:,} |"
            for d, c in sorted(self.counts.items())
        ]
        totals = [sum(c[k] for c in self.counts.values()) for k in ("total", "excluded", "evaluated")]
        rows.append(f"| **total** | {totals[0]:,} | {totals[1]:,} | {totals[2]:,} |")
        errors = sum(c["kept_after_error"] for c in self.counts.values())
        note = f"\n\n{RULE}. Id list digest {self.digest}."
        if errors:
            note += f" {errors} question(s) kept because their reference episode ended in an error."
        return f"### {self.name}\n\n" + header + "\n" + "\n".join(rows) + note + "\n"


def load_eval_set_config(path: str | Path, sets: list[str] | None = None) -> EvalSetConfig:
    return load_config(EvalSetConfig, path, sets=sets)


def reference_config(config: EvalSetConfig) -> EvalConfig:
    """The reference run's EvalConfig: the base config with the reference models, ids_file dropped."""
    base = read_base(config.base)
    models = {k: ChatModelConfig.model_validate(v) for k, v in (base.get("models") or {}).items()}
    models.update(config.models)
    models.pop(JUDGE_ROLE, None)  # the rule needs no verdicts
    if config.questions is not None:
        questions = [q.model_dump(mode="json") | {"ids_file": None} for q in config.questions]
    else:
        questions = [{**q, "ids_file": None} for q in base.get("questions") or []]
    return cell_config(
        base,
        f"eval set {config.name}, reference run",
        name=f"{config.name}-reference",
        output_dir=str(Path(config.output_dir) / "reference"),
        mode="pipeline",
        samples=config.samples,
        questions=questions,
        pipeline=driver_pipeline(base),
        models={k: v.model_dump() for k, v in models.items()},
    )


def decide(questions, episodes: list[Episode], name: str = "eval-set") -> EvalSet:
    """Apply the rule to a reference run's episodes (every question must have at least one)."""
    by_question: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        by_question[e.question.id].append(e)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    ids, excluded = [], []
    for q in questions:
        eps = by_question.get(q.id)
        if not eps:
            raise InputError(f"question {q.id}: no reference episode; rerun to finish the reference run")
        c = counts[q.dataset]
        c["total"] += 1
        errored = any(e.stop_reason == "error" for e in eps)
        if not errored and not any(has_subquery(e) for e in eps):
            excluded.append(q.id)
            c["excluded"] += 1
        else:
            ids.append(q.id)
            c["evaluated"] += 1
            c["kept_after_error"] += errored and not any(has_subquery(e) for e in eps)
    table = {
        d: {k: c[k] for k in ("total", "excluded", "evaluated", "kept_after_error")}
        for d, c in counts.items()
    }
    return EvalSet(name=name, rule=RULE, ids=ids, excluded=excluded, counts=table)


def build_eval_set(
    config: EvalSetConfig,
    *,
    pool: ModelPool | None = None,
    retriever: Retriever | None = None,
    progress: bool = True,
) -> EvalSet:
    """Run (or resume) the reference run, decide the set, write eval_set.json and eval_set.md."""
    reference = reference_config(config)
    run = run_eval(reference, pool=pool, retriever=retriever, progress=progress)
    if run.failed:
        raise UserError(
            f"{reference.out}: {len(run.failed)} reference episode(s) failed; rerun the same command to retry"
        )
    result = decide(select_questions(reference.questions), run.episodes, config.name)
    result.source = {
        "questions": [q.model_dump(mode="json", exclude={"ids_file"}) for q in reference.questions],
        "models": {role: m.label() for role, m in reference.models.items()},
        "samples": reference.samples,
        "reference_dir": str(reference.out),
    }
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / EVAL_SET_JSON, result.to_dict())
    write_markdown(result.markdown(), out / EVAL_SET_MD)
    return result
