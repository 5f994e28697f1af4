"""GRPO prompts from rollouts: (sub-query, reference answer) pairs from verified teacher reports.

A teacher run qualifies when it finished with a report and its outcome is correct (the filter's
`is_correct`: EM == 1 and, by default, judge True). Its report's answer becomes the reference
the student's own answer is scored against. Sub-queries are deduplicated by text (whitespace
and case folded); further verified answers to the same sub-query are kept as extra aliases.

Rows: `prompt` (system + user messages, TRL conversational format), `reference` (list of
answer aliases, first = first verified report), `sub_query`, `question_id`, `dataset`,
`episode_id`, `source_run_id`, and the episode the sub-query came from, for the `outcome`
reward: `question` (the original question), `golden_answers`, `findings` (every dispatched
sub-query with the driver's report, `{sub_query, answer, evidence}`, answer None where there
was none, in the answerer's order) and `position` (this sub-query's index in `findings`).
A sub-query seen in several episodes keeps the first one's context.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from executor_sft.agents.pipeline import driver_findings
from executor_sft.agents.prompting import Prompts, fill
from executor_sft.errors import MissingFileError
from executor_sft.files import iter_records
from executor_sft.files import write_jsonl as write_jsonl  # the package's one writer, (path, rows
from executor_sft.filters.records import RecordError, parse_run
from executor_sft.metrics.answer import normalize_answer
from executor_sft.schema import Episode, Message, Report, Role
from executor_sft.store import iter_episodes_by_id

logger = logging.getLogger(__name__)


@dataclass
class GRPODataReport:
    """Counts behind one extraction (printed by the recipe, returned by the library call)."""

    episodes: int = 0
    runs_considered: int = 0
    examples: int = 0
    duplicates: int = 0
    extra_aliases: int = 0
    excluded: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.excluded.items())) or "none"
        return (
            f"{self.examples} GRPO examples from {self.episodes} episodes "
            f"({self.runs_considered} runs of the selected roles; {self.duplicates} duplicate sub-queries, "
            f"{self.extra_aliases} extra answer aliases; excluded: {reasons})"
        )


def _sub_query_key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _field(d: Mapping[str, Any], key: str, where: str, path: str, kind: type) -> Any:
    value = d.get(key)
    if not isinstance(value, kind):
        raise RecordError(where, f"{path}.{key}", f"must be a {kind.__name__}, got {value!r}")
    return value


def _system_prompt(
    run: Mapping[str, Any], override: str | None, top_k: int, max_searches: int, prompts: Prompts
) -> str:
    if override is not None:
        text = Prompts(executor_native=override).get("executor_native")
        return fill(text, top_k=top_k, max_searches=max_searches)
    messages = run.get("messages") or []
    if messages and isinstance(messages[0], Mapping) and messages[0].get("role") == "system":
        return str(messages[0].get("content") or "")
    return prompts.render("executor_native", top_k=top_k, max_searches=max_searches)


def build_prompt(sub_query: str, system_prompt: str) -> list[Message]:
    """The executor's fresh context: system prompt + the sub-query as the user turn."""
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": sub_query}]


def _episode_runs(where: str, ep: Any) -> tuple[Mapping[str, Any], list[Any]]:
    """The episode's question mapping (empty when absent) and its runs, or a `RecordError`."""
    if not isinstance(ep, Mapping):
        raise RecordError(where, "<record>", "must be a JSON object")
    runs = ep.get("runs")
    if not isinstance(runs, list):
        raise RecordError(where, "runs", "must be a list")
    question = ep.get("question") if isinstance(ep.get("question"), Mapping) else {}
    return question, runs


def _verified_answer(
    run: Mapping[str, Any], where: str, path: str, require_judge: bool, report: GRPODataReport
) -> str | None:
    """The whitespace-folded answer of a correct, non-counterfactual run; None (and counted) otherwise."""
    if run.get("counterfactual_of") is not None:
        report.excluded["counterfactual"] += 1
        return None
    failure = parse_run(run, where, path).correctness_failure(require_judge=require_judge)
    if failure is not None:
        report.excluded[failure] += 1
        return None
    rep = run.get("report")
    if not isinstance(rep, Mapping):
        raise RecordError(where, f"{path}.report", "must be an object for a run that finished with a report")
    answer = " ".join(_field(rep, "answer", where, f"{path}.report", str).split())
    if not normalize_answer(answer):
        report.excluded["empty_answer"] += 1
        return None
    return answer


def _finding(sub_query: str, report: Report | None) -> dict[str, Any]:
    return {
        "sub_query": sub_query,
        "answer": report.answer if report is not None else None,
        "evidence": report.evidence if report is not None else None,
    }


def _episode_context(where: str, ep: Mapping[str, Any]) -> tuple[dict[str, Any], dict[tuple[int, int], int]]:
    """The episode's columns for the outcome reward, and each (round, sub-query index)'s position.

    The findings are the answerer's (`agents.pipeline.driver_findings`); an episode recorded
    without rounds falls back to its driver's runs in (round, index) order.
    """
    from pydantic import ValidationError

    try:
        episode = Episode.model_validate(ep)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RecordError(where, ".".join(str(p) for p in err["loc"]) or "<record>", err["msg"]) from None
    findings = driver_findings(episode)
    if not findings:
        driver = episode.config.get("driver", Role.TEACHER)
        runs = sorted(
            (r for r in episode.runs if r.role == driver), key=lambda r: (r.round, r.sub_query_index)
        )
        findings = [((r.round, r.sub_query_index), r.sub_query, r.report) for r in runs]
    columns = {
        "question": episode.question.question,
        "golden_answers": list(episode.question.golden_answers),
        "findings": [_finding(q, report) for _, q, report in findings],
    }
    return columns, {slot: i for i, (slot, _, _) in enumerate(findings)}


def _add_alias(row: dict[str, Any], answer: str, report: GRPODataReport) -> None:
    """A further verified answer to a seen sub-query: an extra alias unless it normalises the same."""
    report.duplicates += 1
    aliases = row["reference"]
    if normalize_answer(answer) not in {normalize_answer(a) for a in aliases}:
        aliases.append(answer)
        report.extra_aliases += 1


def grpo_examples_from_episodes(
    episodes: Iterable[tuple[str, Mapping[str, Any]]],
    roles: tuple[str, ...] = (Role.TEACHER,),
    require_judge: bool = True,
    system_prompt: str | None = None,
    top_k: int = 3,
    max_searches: int = 2,
    report: GRPODataReport | None = None,
) -> list[dict[str, Any]]:
    """Rows from (where, episode dict) pairs; `where` (e.g. `file:line`) is used in error messages.

    `system_prompt`: None = the system message recorded in each teacher run (what SFT trained
    on), falling back to the packaged executor prompt; text or `file:<path>` = that prompt,
    with `{top_k}`/`{max_searches}` filled in.
    """
    report = report if report is not None else GRPODataReport()
    prompts = Prompts()
    by_key: dict[str, dict[str, Any]] = {}
    for where, ep in episodes:
        report.episodes += 1
        question, runs = _episode_runs(where, ep)
        new: list[tuple[dict[str, Any], tuple[Any, Any], str]] = []
        for i, run in enumerate(runs):
            path = f"runs[{i}]"
            if not isinstance(run, Mapping):
                raise RecordError(where, path, "must be an object")
            if run.get("role") not in roles:
                continue
            report.runs_considered += 1
            answer = _verified_answer(run, where, path, require_judge, report)
            if answer is None:
                continue
            sub_query = " ".join(_field(run, "sub_query", where, path, str).split())
            if not sub_query:
                raise RecordError(where, f"{path}.sub_query", "is empty")
            key = _sub_query_key(sub_query)
            if key in by_key:
                _add_alias(by_key[key], answer, report)
                continue
            by_key[key] = {
                "prompt": build_prompt(
                    sub_query, _system_prompt(run, system_prompt, top_k, max_searches, prompts)
                ),
                "reference": [answer],
                "sub_query": sub_query,
                "question_id": str(question.get("id", "")),
                "dataset": str(question.get("dataset") or "unknown"),
                "episode_id": str(ep.get("episode_id", "")),
                "source_run_id": str(run.get("run_id", "")),
            }
            new.append((by_key[key], (run.get("round"), run.get("sub_query_index")), f"{path}.round"))
        if new:
            _add_context(where, ep, new)
    report.examples = len(by_key)
    return list(by_key.values())


def _add_context(
    where: str, ep: Mapping[str, Any], new: list[tuple[dict[str, Any], tuple[Any, Any], str]]
) -> None:
    columns, positions = _episode_context(where, ep)
    for row, slot, path in new:
        if slot not in positions:
            raise RecordError(where, path, f"round/sub_query_index {slot} is not a dispatched sub-query")
        row.update(columns, position=positions[slot])


def grpo_examples_from_rollouts(
    path: str | Path | Iterable[str | Path], report: GRPODataReport | None = None, **options: Any
) -> list[dict[str, Any]]:
    """GRPO rows from one or more rollouts.jsonl files, each read by episode id as the filter reads
    it, so the rows do not depend on the order runs finished in. `options` are the keyword arguments
    of `grpo_examples_from_episodes` (roles, require_judge, system_prompt, top_k, max_searches),
    whose defaults apply."""
    paths = [Path(path)] if isinstance(path, str | Path) else [Path(p) for p in path]
    report = report if report is not None else GRPODataReport()
    for p in paths:
        if not p.is_file():
            raise MissingFileError(f"rollouts file not found: {p}")

    def episodes():
        for p in paths:
            yield from tqdm(iter_episodes_by_id(p), desc=f"read {p.name}", unit="ep", leave=False)

    rows = grpo_examples_from_episodes(episodes(), report=report, **options)
    logger.info(report.summary())
    return rows


def grpo_examples_from_questions(
    path: str | Path, system_prompt: str | None = None, top_k: int = 3, max_searches: int = 2
) -> list[dict[str, Any]]:
    """Rows from any questions JSONL (`data.questions.load_questions`), each question one executor prompt.

    `reference` is the question's gold answers; there is no episode, so these rows serve the
    stages that need only prompts (distillation) and the references' rewards, not `outcome`.
    `system_prompt`: None = the packaged executor prompt; text or `file:<path>` = that prompt.
    """
    from executor_sft.data.questions import load_questions

    prompts = Prompts() if system_prompt is None else Prompts(executor_native=system_prompt)
    system = prompts.render("executor_native", top_k=top_k, max_searches=max_searches)
    return [
        {
            "prompt": build_prompt(" ".join(q.question.split()), system),
            "reference": list(q.golden_answers),
            "sub_query": " ".join(q.question.split()),
            "question_id": q.id,
            "dataset": q.dataset,
        }
        for q in load_questions(path)
    ]


def to_dataset(rows: list[dict[str, Any]]):
    """A `datasets.Dataset` TRL's GRPOTrainer takes as `train_dataset`."""
    from datasets import Dataset

    if not rows:
        raise ValueError(
            "no GRPO examples: no correct teacher report in the rollouts (check roles / require_judge)"
        )
    return Dataset.from_list(rows)


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read GRPO rows back, checking the two columns training needs (errors name file:line:field)."""
    rows = []
    for i, row in iter_records(path, require_object=False):
        where = f"{path}:{i}"
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise RecordError(where, "prompt", "must be a list of chat messages")
        ref = row.get("reference")
        if isinstance(ref, str):
            row["reference"] = [ref]
        elif not (isinstance(ref, list) and ref and all(isinstance(r, str) for r in ref)):
            raise RecordError(
                where, "reference", f"must be a string or a non-empty list of strings, got {ref!r}"
            )
        rows.append(row)
    return rows
