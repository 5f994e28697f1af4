"""The `outcome` reward: what the whole system answers with this rollout's report in it.

For each completion the fixed answerer is called on the episode the sub-query came from, with
the rollout's report in place of the driver's at its position (`agents.pipeline.
substitute_report`, the substitution collection labels runs with), and its final answer is
scored against the question's GOLD answers (EM, F1, or a judge's verdict). So the signal means
what the filter's correctness means, and a rollout that repeats a wrong teacher answer scores
whatever that wrong answer earns the system: nothing.

Each rollout is credited with the outcome of its own substitution (every other finding fixed),
not a share of one rollout-level reward; docs/post_training.md sets this against WideSeek-R1's
shared advantage. `agent_average` divides by the episode's number of sub-queries, so each
question weighs the same however many sub-agents it took (ours: an analogue of WideSeek-R1's
agent-level reweighting, which averages one shared advantage over a rollout's agents; here each
executor rollout has its own reward, docs/post_training.md).

A report given without any search scores `grounding_score` times its score (0 by default: the
executor's prompt forbids answering from memory, and SFT never trains on zero-search runs).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from executor_sft.agents.answerer import Finding, run_answerer
from executor_sft.agents.pipeline import substitute_report
from executor_sft.agents.prompting import Prompts
from executor_sft.errors import ConfigError
from executor_sft.grpo.rewards import (
    DEFAULT_GROUNDING_SCORE,
    REWARDS,
    JudgeFn,
    check_grounding_score,
    count_tool_calls,
    final_report,
    grounded,
)
from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.safe_interrupt import run_async
from executor_sft.schema import Report

OUTCOME_COLUMNS = ("question", "golden_answers", "findings", "position")
"""The dataset columns the reward reads (`grpo.data` writes them from the episode)."""


def _report(finding: Mapping[str, Any]) -> Report | None:
    answer = finding.get("answer")
    return None if answer is None else Report(answer=answer, evidence=finding.get("evidence") or "")


@dataclass
class OutcomeScore:
    """What the reward saw for one completion."""

    searches: int
    report: Report | None
    answer: str | None  # the answerer's final answer (None without a report)
    score: float  # the answer's EM / F1 / verdict against the gold answers
    reward: float


class OutcomeReward:
    """TRL reward function (async): the answerer's final answer with the rollout's report substituted.

    `answerer` is a `ChatModel` (the fixed answerer of collection). `metric`: em, f1 or judge
    (then `judge(question, golden_answers, prediction)` is needed). A completion without a
    final report scores 0 and costs no call. Identical substitutions in one batch share one
    answerer call. Logs `outcome/correct`, `outcome/score`, `outcome/searches` and
    `outcome/zero_search_correct` (correct answers given without a search, before grounding).
    """

    columns = OUTCOME_COLUMNS

    def __init__(
        self,
        answerer: Any,
        metric: str = "em",
        judge: JudgeFn | Any = None,
        grounding_score: float | None = DEFAULT_GROUNDING_SCORE,
        agent_average: bool = False,
        answerer_prompt: str | None = None,
        max_concurrency: int = 16,
        metric_prefix: str = "outcome",
        name: str = "outcome",
    ):
        if not callable(getattr(answerer, "chat", None)):
            raise ConfigError(
                f"the outcome reward's answerer must be a chat model (with .chat), got {answerer!r}"
            )
        if metric not in ("em", "f1", "judge"):
            raise ConfigError(f"reward_kwargs.{name}.metric: em, f1 or judge, got {metric!r}")
        if metric == "judge":
            method = getattr(judge, "judge", None)
            judge = method if not callable(judge) and callable(method) else judge
            if not callable(judge):
                raise ConfigError(f"reward {name}: metric judge needs a judge, got {judge!r}")
        check_grounding_score(grounding_score, name)
        self.answerer = answerer
        self.metric = metric
        self.judge = judge
        self.grounding_score = grounding_score
        self.agent_average = agent_average
        self.prompts = Prompts(answerer=answerer_prompt)
        self.max_concurrency = max_concurrency
        self.metric_prefix = metric_prefix
        self.__name__ = name  # TRL logs `rewards/<__name__>/mean`
        self.last: list[OutcomeScore] = []

    def check_training_args(self, args: Any) -> None:
        """Agent averaging is a per-question constant: per-group std scaling would cancel it."""
        if self.agent_average and str(getattr(args, "scale_rewards", "group")) in ("group", "True"):
            raise ConfigError(
                f"reward_kwargs.{self.__name__}.agent_average needs scale_rewards: batch or none "
                "(scaling each group by its own std cancels a per-question weight)"
            )

    async def _score(self, question: str, gold: list[str], answer: str | None) -> float:
        if answer is None:
            return 0.0
        if self.metric == "em":
            return exact_match(answer, gold)
        if self.metric == "f1":
            return f1_score(answer, gold)
        verdict = self.judge(question, gold, answer)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return 1.0 if verdict is True else 0.0

    async def _outcome(self, sem: asyncio.Semaphore, question: str, gold: list[str], findings: list[Finding]):
        async with sem:
            result = await run_answerer(self.answerer, question, findings, prompts=self.prompts)
            return result.answer, await self._score(question, gold, result.answer)

    async def __call__(
        self,
        prompts=None,
        completions: Sequence[Any] = (),
        question: Sequence[str] | None = None,
        golden_answers: Sequence[Sequence[str]] | None = None,
        findings: Sequence[Sequence[Mapping[str, Any]]] | None = None,
        position: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        n = len(completions)
        columns = {
            "question": question,
            "golden_answers": golden_answers,
            "findings": findings,
            "position": position,
        }
        missing = [k for k, v in columns.items() if v is None or len(v) != n]
        if missing:
            raise ValueError(
                f"the outcome reward needs the columns {list(OUTCOME_COLUMNS)} (missing or short: {missing}); "
                "build the rows from rollouts (recipes/build_grpo_data.py)"
            )
        sem = asyncio.Semaphore(self.max_concurrency)
        calls: dict[tuple, asyncio.Task] = {}
        keys: list[tuple | None] = []
        parsed = [(count_tool_calls(c), final_report(c)) for c in completions]
        for i, (_, report) in enumerate(parsed):
            if report is None:  # no report: nothing to substitute, no call
                keys.append(None)
                continue
            pairs = substitute_report(
                [(f["sub_query"], _report(f)) for f in findings[i]], position[i], report
            )
            gold = list(golden_answers[i])
            key = (question[i], tuple(gold), tuple((q, r and (r.answer, r.evidence)) for q, r in pairs))
            if key not in calls:
                calls[key] = asyncio.ensure_future(self._outcome(sem, question[i], gold, pairs))
            keys.append(key)
        done = {key: await task for key, task in calls.items()}
        self.last = []
        for i, ((searches, report), key) in enumerate(zip(parsed, keys, strict=True)):
            answer, score = done[key] if key is not None else (None, 0.0)
            reward = grounded(score, searches, self.grounding_score)
            if self.agent_average:
                reward /= max(1, len(findings[i]))
            self.last.append(OutcomeScore(searches, report, answer, score, reward))
        self._log(kwargs.get("log_metric"))
        return [s.reward for s in self.last]

    def _log(self, log_metric: Any) -> None:
        if log_metric is None or not self.last:
            return
        n, p = len(self.last), self.metric_prefix
        log_metric(f"{p}/correct", sum(s.score >= 1.0 for s in self.last) / n)
        log_metric(f"{p}/score", sum(s.score for s in self.last) / n)
        log_metric(f"{p}/searches", sum(s.searches for s in self.last) / n)
        log_metric(f"{p}/zero_search_correct", sum(s.score >= 1.0 and s.searches == 0 for s in self.last) / n)

    def score_sync(self, **kwargs: Any) -> list[float]:
        """Run the async reward outside an event loop (scripts and tests)."""
        return run_async(self(**kwargs))


@REWARDS.register("outcome")
def outcome(
    answerer: Any,
    metric: str = "em",
    grounding_score: float | None = DEFAULT_GROUNDING_SCORE,
    agent_average: bool = False,
    answerer_prompt: str | None = None,
    max_concurrency: int = 16,
) -> OutcomeReward:
    """The system's final answer with the rollout's report substituted, by EM (or `metric: f1`) on gold."""
    if metric == "judge":
        raise ConfigError("reward_kwargs.outcome.metric: em or f1 (for a judge's verdict use outcome_judge)")
    return OutcomeReward(
        answerer, metric, None, grounding_score, agent_average, answerer_prompt, max_concurrency
    )


@REWARDS.register("outcome_judge")
def outcome_judge(
    answerer: Any,
    judge: JudgeFn | Any,
    grounding_score: float | None = DEFAULT_GROUNDING_SCORE,
    agent_average: bool = False,
    answerer_prompt: str | None = None,
    max_concurrency: int = 16,
) -> OutcomeReward:
    """As `outcome`, scored by the run's judge on the original question and the gold answers."""
    return OutcomeReward(
        answerer, "judge", judge, grounding_score, agent_average, answerer_prompt, max_concurrency,
        name="outcome_judge",
    )  # fmt: skip
