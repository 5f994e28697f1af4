"""One episode of the role-factorised agent: backbone rounds, executors per role, answerer.

Collection semantics (docs/architecture.md, "Collection semantics"): every sub-query is executed by every executor role
concurrently; only the driver role's reports reach the backbone and the answerer; the other
roles are "shadow" runs in the same state. A run's outcome is the final answer the answerer
gives when that run's report replaces the driver's at its position (`answer_with_substitution`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from executor_sft.agents.answerer import AnswerResult, Finding, run_answerer
from executor_sft.agents.backbone import BackboneSession
from executor_sft.agents.calls import task_group
from executor_sft.agents.config import CounterfactualConfig, PipelineConfig
from executor_sft.agents.executor import run_executor
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.llm.routing import routing
from executor_sft.metrics.judge import LLMJudge
from executor_sft.metrics.scoring import score_answer
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import (
    Episode,
    ExecutorRun,
    Outcome,
    Question,
    Report,
    Role,
    Round,
    Usage,
)
from executor_sft.schema import episode_id as make_episode_id

BACKBONE, ANSWERER = Role.BACKBONE, Role.ANSWERER
OUTCOME_USAGE = Role.ANSWERER_OUTCOMES
"""Usage key for the answerer calls spent on labelling non-driver runs (kept apart from the pipeline's own cost)."""


def make_run_id(episode_id: str, round_index: int, sub_query_index: int, role: str) -> str:
    return f"{episode_id}/r{round_index}/q{sub_query_index}/{role}"


def _judge_from(models: Mapping[str, ChatModel], judge: LLMJudge | None) -> LLMJudge | None:
    if judge is not None:
        return judge
    return LLMJudge(models[Role.JUDGE]) if Role.JUDGE in models else None


async def run_episode(
    question: Question,
    models: Mapping[str, ChatModel],
    retriever: Retriever,
    config: PipelineConfig | None = None,
    sample_index: int = 0,
    *,
    judge: LLMJudge | None = None,
    config_record: Mapping[str, Any] | None = None,
    separate: bool = False,
    counterfactual: CounterfactualConfig | None = None,
) -> Episode:
    """Run backbone -> executors (all roles) -> answerer for one question, then label the runs; never
    raises on model output (an infrastructure failure raises: `agents.calls.INFRASTRUCTURE_ERRORS`).

    `models` maps "backbone", "answerer" and every executor role to a ChatModel (a "judge"
    entry is used when no `judge` is passed; pass one `LLMJudge` to share its cache).
    `config_record` is `episode_config_record(config, models, retriever, judge)` computed
    once by a caller that runs many episodes with the same objects (the collection engine);
    its nested values are shared between those episodes, so they must not be mutated.
    `separate=True` (separate collection): only `config.driver` runs, the episode id is
    `episode_id(question.id, sample_index, config.driver)` and `Episode.driver` is set.
    `counterfactual` (collection's): the correct multi-search runs of its role are re-run with a
    smaller budget and added to the episode, labelled like the others (`counterfactual_reruns`).
    """
    config = config or PipelineConfig()
    roles = [config.driver] if separate else list(config.executor_roles)
    judge = _judge_from(models, judge)
    episode_id = make_episode_id(question.id, sample_index, config.driver if separate else None)
    with routing(episode_id):  # the episode's backbone rounds and answers stay on one replica each
        session = BackboneSession(
            models[BACKBONE],
            question.question,
            max_parallel=config.max_parallel,
            max_rounds=config.max_rounds,
            prompts=config.prompts,
            sampling=config.sampling_for(BACKBONE),
        )
        trajectory = _Trajectory(usage={r: Usage() for r in (BACKBONE, *roles, ANSWERER)})
        research_start = time.perf_counter()
        await _run_rounds(session, trajectory, 0, models, retriever, roles, config, episode_id)
        research_s = time.perf_counter() - research_start
        rounds, runs, findings, usage = (
            trajectory.rounds,
            trajectory.runs,
            trajectory.findings,
            trajectory.usage,
        )
        stop_reason, error = trajectory.stop_reason, trajectory.error

        answer, answerer_record = None, None
        if stop_reason != "error" or findings:
            options = _answerer_options(config, question)
            result = await run_answerer(models[ANSWERER], question.question, findings, **options)
            answerer_record = result.record
            if result.error is not None:
                stop_reason, error = "error", error or f"answerer: {result.error}"
            else:
                usage[ANSWERER].add(result.record.usage)
                answer = result.answer

        metrics = await score_answer(question, answer, judge)
        episode = Episode(
            episode_id=episode_id,
            sample_index=sample_index,
            question=question,
            config=config_record
            if config_record is not None
            else episode_config_record(config, models, retriever, judge),
            rounds=rounds,
            runs=runs,
            answer=answer,
            metrics=metrics,
            usage=usage,
            stop_reason=stop_reason,
            error=error,
            answerer=answerer_record,
            research_s=research_s,
            driver=config.driver if separate else None,
        )
        for run in runs:
            if run.role == config.driver:
                run.outcome = Outcome(answer=answer, em=metrics.em, f1=metrics.f1, judge=metrics.judge)
        if config.label_outcomes:
            shadows = [run for run in runs if run.role != config.driver]
            labels = [
                label_outcome(episode, run, models, retriever, config=config, judge=judge) for run in shadows
            ]
            async with task_group() as group:
                tasks = list(map(group.create_task, labels))  # no comprehension frame above the tasks
            for run, task in zip(shadows, tasks, strict=True):
                run.outcome = task.result()
                add_outcome_usage(episode, run.outcome)
    if counterfactual is not None and counterfactual.enabled:  # outside `routing`: not the episode's calls
        reruns = counterfactual_reruns(episode, models, retriever, config, counterfactual, judge)
        async with task_group() as group:
            tasks = list(map(group.create_task, reruns))  # no comprehension frame above the tasks
        for task in tasks:
            run = task.result()
            episode.runs.append(run)
            episode.usage.setdefault(run.role, Usage()).add(run.usage)
            add_outcome_usage(episode, run.outcome)
    return episode


def counterfactual_reruns(
    episode: Episode,
    models: Mapping[str, ChatModel],
    retriever: Retriever,
    config: PipelineConfig,
    settings: CounterfactualConfig,
    judge: LLMJudge | None,
) -> list[Awaitable[ExecutorRun]]:
    """A `run_counterfactual` for every correct multi-search run of `settings.role`, for the caller
    to await. `config` is the one the episode ran with (in separate collection: `for_driver(...)`);
    its `outcome.mode` decides how the re-runs are labelled (replay uses `models`' backbone and driver)."""
    require_judge = settings.require_judge if settings.require_judge is not None else judge is not None
    return [
        run_counterfactual(
            episode,
            run,
            models[settings.role],
            retriever,
            models[ANSWERER],
            config=config,
            judge=judge,
            max_searches=settings.max_searches,
            models=models,
        )
        for run in episode.runs
        if run.role == settings.role
        and run.counterfactual_of is None
        and run.n_searches >= settings.min_searches
        and run.is_correct(require_judge=require_judge)
    ]


@dataclasses.dataclass
class _Trajectory:
    """What the backbone rounds of an episode (or of a replay) produce."""

    usage: dict[str, Usage]
    rounds: list[Round] = dataclasses.field(default_factory=list)
    runs: list[ExecutorRun] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    stop_reason: str = "round_budget"
    error: str | None = None


async def _run_rounds(
    session: BackboneSession,
    trajectory: _Trajectory,
    first_round: int,
    models: Mapping[str, ChatModel],
    retriever: Retriever,
    roles: list[str],
    config: PipelineConfig,
    id_prefix: str,
) -> None:
    """Backbone rounds `first_round`.. until it stops or T is reached; every sub-query is run by
    every role in `roles`, and the driver's reports go back to the backbone and into `findings`."""
    usage = trajectory.usage
    for r in range(first_round, config.max_rounds):
        step = await session.decide()
        if step.error is None:
            usage[BACKBONE].add(step.record.usage)
        trajectory.rounds.append(
            Round(
                index=r,
                sub_queries=step.decision.sub_queries,
                backbone=step.record,
                dropped_sub_queries=step.decision.dropped,
            )
        )
        if step.error is not None:
            trajectory.stop_reason, trajectory.error = "error", f"backbone: {step.error}"
            return
        if step.decision.stop:
            trajectory.stop_reason = "stopped"
            return
        jobs = [
            _execute(models[role], retriever, q, role, config, id_prefix, r, i)
            for i, q in enumerate(step.decision.sub_queries)
            for role in roles
        ]
        async with task_group() as group:
            tasks = list(map(group.create_task, jobs))  # no comprehension frame above the tasks
        round_runs = [task.result() for task in tasks]
        trajectory.runs.extend(round_runs)
        for run in round_runs:
            usage[run.role].add(run.usage)
        by_index = {run.sub_query_index: run for run in round_runs if run.role == config.driver}
        pairs = [(q, by_index[i].report) for i, q in enumerate(step.decision.sub_queries)]
        trajectory.findings.extend(pairs)
        if r + 1 < config.max_rounds:
            session.add_reports(r, pairs, rounds_left=config.max_rounds - r - 1)


def add_outcome_usage(episode: Episode, outcome: Outcome | None) -> None:
    """Add what labelling a run cost to the episode's usage: its answerer call (`answerer_outcomes`)
    and, for a replayed outcome, the backbone and driver-executor calls (`backbone_replay`,
    `executor_replay`). Failed answerer calls are not counted (as for the episode's own)."""
    if outcome is None:
        return
    call = outcome.answerer_call
    if call and not call.get("error"):
        episode.usage.setdefault(OUTCOME_USAGE, Usage()).add(Usage(**{**call["usage"], "calls": 1}))
    replay = outcome.replay or {}
    for key, spent in (replay.get("usage") or {}).items():
        usage = Usage.model_validate(spent)
        if usage.calls:
            episode.usage.setdefault(key, Usage()).add(usage)


def _execute(
    model: ChatModel,
    retriever: Retriever,
    sub_query: str,
    role: str,
    config: PipelineConfig,
    episode_id: str,
    round_index: int,
    sub_query_index: int,
    *,
    max_searches: int | None = None,
    run_role: str | None = None,
    counterfactual_of: str | None = None,
) -> Awaitable[ExecutorRun]:
    """`run_executor` on one sub-query with `role`'s settings (not a coroutine of its own: the
    run is awaited where it is gathered)."""
    settings = config.executor_settings(role)
    if max_searches is not None:
        settings = settings.replace(max_searches=max_searches)
    run_role = run_role or role
    return run_executor(
        model,
        retriever,
        sub_query,
        settings,
        role=run_role,
        run_id=make_run_id(episode_id, round_index, sub_query_index, run_role),
        round=round_index,
        sub_query_index=sub_query_index,
        counterfactual_of=counterfactual_of,
        max_in_flight=config.max_concurrent_executors,
    )


def episode_config_record(
    config: PipelineConfig, models: Mapping[str, ChatModel], retriever: Retriever, judge: LLMJudge | None
) -> dict[str, Any]:
    """The `config` field of an episode run with these objects (`judge` as `run_episode` resolves it)."""
    record = config.model_dump(mode="json")
    record["models"] = {role: str(getattr(m, "name", "unknown")) for role, m in models.items()}
    record["model_sampling"] = {
        role: dataclasses.asdict(m.sampling)
        for role, m in models.items()
        if isinstance(getattr(m, "sampling", None), SamplingParams)
    }
    record["retriever"] = getattr(retriever, "index_id", "unnamed")
    if judge is not None:
        record["judge_model"] = str(getattr(judge.model, "name", "unknown"))
    return record


def pipeline_config_of(episode: Episode) -> PipelineConfig:
    """The PipelineConfig an episode was run with (recorded in `episode.config`)."""
    fields = PipelineConfig.model_fields
    return PipelineConfig.model_validate({k: v for k, v in episode.config.items() if k in fields})


def driver_findings(episode: Episode, driver: str | None = None) -> list[tuple[tuple[int, int], str, Any]]:
    """((round, sub_query_index), sub-query, driver report) for every dispatched sub-query, in order."""
    driver = driver or episode.config.get("driver", Role.TEACHER)
    reports = {(run.round, run.sub_query_index): run.report for run in episode.runs if run.role == driver}
    return [
        ((rnd.index, i), q, reports.get((rnd.index, i)))
        for rnd in episode.rounds
        for i, q in enumerate(rnd.sub_queries)
    ]


def substitute_report(findings: Sequence[Finding], at: int, report: Report | None) -> list[Finding]:
    """The answerer's findings with `report` in place of the one at position `at`, all others unchanged.

    The one substitution behind a run's outcome: collection labels runs with it, and GRPO's
    `outcome` reward scores each rollout with it.
    """
    if not 0 <= at < len(findings):
        raise ValueError(f"position {at} is not one of the {len(findings)} findings")
    return [(q, report if i == at else r) for i, (q, r) in enumerate(findings)]


async def answer_with_substitution(
    episode: Episode,
    run: ExecutorRun,
    answerer: ChatModel,
    *,
    config: PipelineConfig | None = None,
    judge: LLMJudge | None = None,
) -> Outcome:
    """The outcome of `run`: the answerer re-run with `run.report` in place of the driver's report.

    All other findings are unchanged. When the substituted report equals the driver's (the
    driver run itself, or an identical report) the episode's own answer and metrics are
    reused without a call. A failed answerer call yields an outcome with `answer=None`,
    em = f1 = 0, `judge=None` and `error` set. Raises ValueError only if `run`'s position
    (round, sub_query_index) is not a sub-query of `episode`.
    """
    config = config or pipeline_config_of(episode)
    findings, at, own = _driver_position(episode, run, config)
    if own is not None:
        return own
    pairs = substitute_report([(q, report) for _, q, report in findings], at, run.report)
    options = _answerer_options(config, episode.question)
    result = await run_answerer(answerer, episode.question.question, pairs, **options)
    return await _scored(episode, result, judge)


def _driver_position(
    episode: Episode, run: ExecutorRun, config: PipelineConfig
) -> tuple[list, int, Outcome | None]:
    """The driver's findings, `run`'s position among them, and the episode's own outcome where
    `run.report` equals the driver's there (so no call is needed), else None."""
    findings = driver_findings(episode, config.driver)
    position = (run.round, run.sub_query_index)
    slots = [pos for pos, _, _ in findings]
    if position not in slots:
        raise ValueError(
            f"{run.run_id}: round {run.round} sub-query {run.sub_query_index} is not in {episode.episode_id}"
        )
    at = slots.index(position)
    if findings[at][2] == run.report and episode.answer is not None:
        m = episode.metrics
        own = Outcome(answer=episode.answer, em=m.em, f1=m.f1, judge=m.judge, substituted=False)
        return findings, at, own
    return findings, at, None


def _answerer_options(config: PipelineConfig, question: Question) -> dict[str, Any]:
    """`run_answerer`'s settings for `question` under `config` (the same for an episode and its labels)."""
    return {
        "prompts": config.prompts,
        "sampling": config.sampling_for(ANSWERER),
        "answer_format": question.answer_format,
    }


async def _scored(episode: Episode, result: AnswerResult, judge: LLMJudge | None, **recorded: Any) -> Outcome:
    """The substituted outcome of the answerer's `result`, scored; `recorded` adds fields (a
    replay's `mode` and `replay`). A failed call yields `answer=None` with `error` set."""
    recorded.update(substituted=True, answerer_call=result.record.model_dump(mode="json"))
    if result.error is not None:
        return Outcome(answer=None, em=0.0, f1=0.0, judge=None, error=result.error, **recorded)
    m = await score_answer(episode.question, result.answer, judge)
    return Outcome(answer=result.answer, em=m.em, f1=m.f1, judge=m.judge, **recorded)


async def answer_with_replay(
    episode: Episode,
    run: ExecutorRun,
    models: Mapping[str, ChatModel],
    retriever: Retriever,
    *,
    config: PipelineConfig | None = None,
    judge: LLMJudge | None = None,
) -> Outcome:
    """The outcome of `run` by replay: the backbone re-run from `run`'s round with `run.report` in place.

    The backbone's conversation up to and including its decision in `run.round` is rebuilt
    from the episode's call records (no call), that round's reports are the driver's with
    `run.report` at `run`'s position, and the backbone then continues: each later round's
    sub-queries are executed by the driver (`models[config.driver]`), and the answerer answers
    from the findings of the kept rounds plus the replayed ones. The replayed rounds, runs,
    stop reason and usage are recorded in `Outcome.replay` (`mode="replay"`).

    When the report equals the driver's, the episode's own outcome is reused without a call
    (`substituted=False`), as `answer_with_substitution` does. A failed backbone call ends the
    replay early (answered from the findings so far, `replay.error` set); a failed answerer
    call yields `answer=None` with `error` set. Raises ValueError only if `run`'s position is
    not a sub-query of `episode`.
    """
    config = config or pipeline_config_of(episode)
    findings, at, own = _driver_position(episode, run, config)
    if own is not None:
        return own
    session = BackboneSession(
        models[BACKBONE],
        episode.question.question,
        max_parallel=config.max_parallel,
        max_rounds=config.max_rounds,
        prompts=config.prompts,
        sampling=config.sampling_for(BACKBONE),
    )
    decided = next(rnd for rnd in episode.rounds if rnd.index == run.round).backbone
    # The conversation exactly as the backbone had it after deciding this round.
    session.messages = [dict(m) for m in decided.messages] + [
        {"role": "assistant", "content": decided.response.get("content") or ""}
    ]
    swapped = [(pos, q, run.report if i == at else report) for i, (pos, q, report) in enumerate(findings)]
    kept: list[Finding] = [(q, report) for (rnd, _), q, report in swapped if rnd <= run.round]
    round_pairs: list[Finding] = [(q, report) for (rnd, _), q, report in swapped if rnd == run.round]
    trajectory = _Trajectory(usage={BACKBONE: Usage(), config.driver: Usage()}, findings=kept)
    if run.round + 1 < config.max_rounds:
        session.add_reports(run.round, round_pairs, rounds_left=config.max_rounds - run.round - 1)
        await _run_rounds(
            session,
            trajectory,
            run.round + 1,
            models,
            retriever,
            [config.driver],
            config,
            f"{run.run_id}/replay",
        )
    replay = {
        "from_round": run.round,
        "rounds": [rnd.model_dump(mode="json") for rnd in trajectory.rounds],
        "runs": [r.model_dump(mode="json") for r in trajectory.runs],
        "stop_reason": trajectory.stop_reason,
        "error": trajectory.error,
        "usage": {
            Role.BACKBONE_REPLAY: trajectory.usage[BACKBONE].model_dump(mode="json"),
            Role.EXECUTOR_REPLAY: trajectory.usage[config.driver].model_dump(mode="json"),
        },
    }
    options = _answerer_options(config, episode.question)
    result = await run_answerer(models[ANSWERER], episode.question.question, trajectory.findings, **options)
    return await _scored(episode, result, judge, mode="replay", replay=replay)


def label_outcome(
    episode: Episode,
    run: ExecutorRun,
    models: Mapping[str, ChatModel],
    retriever: Retriever,
    *,
    config: PipelineConfig | None = None,
    judge: LLMJudge | None = None,
) -> Awaitable[Outcome]:
    """`run`'s outcome by `config.outcome.mode`: `answer_with_substitution` or `answer_with_replay`,
    returned for the caller to await."""
    config = config or pipeline_config_of(episode)
    if config.outcome.mode == "replay":
        return answer_with_replay(episode, run, models, retriever, config=config, judge=judge)
    return answer_with_substitution(episode, run, models[ANSWERER], config=config, judge=judge)


async def run_counterfactual(
    episode: Episode,
    run: ExecutorRun,
    model: ChatModel,
    retriever: Retriever,
    answerer: ChatModel,
    *,
    config: PipelineConfig | None = None,
    judge: LLMJudge | None = None,
    max_searches: int = 1,
    role: str | None = None,
    models: Mapping[str, ChatModel] | None = None,
) -> ExecutorRun:
    """Re-run `run`'s sub-query with a smaller search budget (same role settings) and label its outcome.

    The new run has role `<role>_budget<max_searches>` (e.g. `teacher_budget1`) unless `role`
    is given, `counterfactual_of = run.run_id`, and an outcome by `config.outcome.mode`:
    answer substitution (with `answerer`), or replay, which needs `models` (backbone, answerer
    and the driver role).
    """
    config = config or pipeline_config_of(episode)
    run_role = role or f"{run.role}_budget{max_searches}"
    new = await _execute(
        model,
        retriever,
        run.sub_query,
        run.role,
        config,
        episode.episode_id,
        run.round,
        run.sub_query_index,
        max_searches=max_searches,
        run_role=run_role,
        counterfactual_of=run.run_id,
    )
    if config.outcome.mode == "replay" and models is None:
        raise ValueError("outcome.mode 'replay' needs models= (backbone, answerer, driver)")
    new.outcome = await label_outcome(
        episode, new, {**(models or {}), ANSWERER: answerer}, retriever, config=config, judge=judge
    )
    return new
