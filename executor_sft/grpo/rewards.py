"""The GRPO rewards: `REWARDS`, and the built-in conditional log-penalty (CLP) on the executor's report.

`R = score * max(0, 1 - eps * log(1 + tool_calls))`, the search-agent blog's CLP ("Making
Search Agents Faster and Smarter", the reward section): a wrong (or missing) report scores 0
whatever it cost, a correct one is discounted by the number of searches with diminishing
marginal cost, so the policy learns to search again only when it pays off. `clp_em`, `clp_f1`
and `clp_judge` are that formula: a correct zero-search report scores 1.0, as the blog's formula
gives. Their grounded variants `clp_em_grounded`, `clp_f1_grounded` and `clp_judge_grounded`
(ours) score a report given without any search `grounding_score * R` instead (`grounded`; 0 by
default), since the executor's prompt forbids answering from memory.

The blog's two comparison rewards register beside them (`additive`, `linear`, over EM or F1):
`R = score + alpha / (1 + tool_calls)` and `R = score * (1 - eps * tool_calls)` (unclamped, so
it goes below 0 past `1 / eps` calls, which is the blog's point against it).

The TRL reward functions below read the executor's multi-turn completion (assistant turns,
with `tool_calls`, and `tool` turns) as TRL hands it over, parse the final report with the
runtime's parser, and score its `<answer>` against the sub-query's reference answers.

`REWARDS` maps a name to a factory of a TRL reward function; the built-ins (`clp_em`, `clp_f1`,
`clp_judge`, their `_grounded` variants, `additive`, `linear`) register there as a user's own
reward does (docs/architecture.md, "A reward").
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from executor_sft.agents.parsing import parse_report
from executor_sft.agents.prompting import Prompts
from executor_sft.errors import ConfigError
from executor_sft.llm.base import ChatError, ChatRefused
from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.registry import Registry
from executor_sft.safe_interrupt import run_async
from executor_sft.schema import Message, Report, content_text

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., Any]
"""A TRL reward function: `(prompts, completions, **columns) -> list[float | None]`, sync or async.
`columns` are the dataset's columns (`reference`, `sub_query`, ...) plus TRL's `log_metric`,
`trainer_state` and `environments`; its `__name__` (else its class name) names the logged
`rewards/<name>/mean`."""
RewardFactory = Callable[..., RewardFunc]
"""Builds one reward function from its `reward_kwargs` (a class is a factory of its instances)."""

REWARDS: Registry[RewardFactory] = Registry("reward")
"""Reward name -> factory. GRPO's `reward_funcs` names entries here or `module:attr` factories."""

JudgeFn = Callable[[str, list[str], str], "bool | None | Awaitable[bool | None]"]
"""judge(question, golden_answers, prediction) -> True/False/None, sync or async. An object with
such a `.judge` method (e.g. `executor_sft.metrics.judge.LLMJudge`) is accepted too."""

DEFAULT_EPS = 0.15
"""The blog's epsilon for CLP (the value it trained with)."""
DEFAULT_GROUNDING_SCORE = 0.0
"""What a report given without any search scores, times its answer score, in the grounded
variants (ours): nothing. The executor's prompt forbids answering from memory and SFT never
trains on zero-search runs (the `no_search` exclusion), so those rewards do not pay for it."""
DEFAULT_ADDITIVE_ALPHA = 0.15
"""`additive`'s alpha (ours: the blog gives the formula but no value; the same size as CLP's eps)."""
DEFAULT_LINEAR_EPS = 0.25
"""`linear`'s eps: the blog's example value (at 0.25 a correct answer with 5 calls is below 0)."""


def clp_reward(em: float, tool_calls: int, eps: float = DEFAULT_EPS) -> float:
    """Conditional log-penalty: `em * max(0, 1 - eps * log(1 + tool_calls))`.

    `em` is the answer score in [0, 1] (EM, F1 or a judge verdict as 0/1). The reward is
    positive for `tool_calls < exp(1/eps) - 1` and exactly 0 from there on.
    """
    if tool_calls < 0:
        raise ValueError(f"tool_calls must be >= 0, got {tool_calls}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if em <= 0:
        return 0.0
    return float(em) * max(0.0, 1.0 - eps * math.log1p(tool_calls))


def additive_reward(score: float, tool_calls: int, alpha: float = DEFAULT_ADDITIVE_ALPHA) -> float:
    """The blog's additive comparison reward: `score + alpha / (1 + tool_calls)` (a fast wrong
    answer earns a positive reward, which is why the blog rejects it)."""
    if tool_calls < 0:
        raise ValueError(f"tool_calls must be >= 0, got {tool_calls}")
    return float(score) + alpha / (1 + tool_calls)


def linear_reward(score: float, tool_calls: int, eps: float = DEFAULT_LINEAR_EPS) -> float:
    """The blog's linear multiplicative comparison reward: `score * (1 - eps * tool_calls)`, unclamped."""
    if tool_calls < 0:
        raise ValueError(f"tool_calls must be >= 0, got {tool_calls}")
    return float(score) * (1.0 - eps * tool_calls)


def grounded(reward: float, searches: int, grounding_score: float | None) -> float:
    """`reward`, or `grounding_score * reward` for a report given without a search (None: no rule)."""
    if searches == 0 and grounding_score is not None:
        return grounding_score * reward
    return reward


def check_grounding_score(value: float | None, name: str) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise ConfigError(f"reward {name}: grounding_score must be in [0, 1] or null, got {value}")


def _as_messages(completion: Any) -> list[Message]:
    """TRL passes conversational completions as message lists; plain text is one assistant turn."""
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    return list(completion or [])


def count_tool_calls(completion: Any, refusal: str | None = None) -> int:
    """Searches the executor's tool calls ran: every entry of `tool_calls` in its assistant turns,
    less the calls answered with the budget-spent refusal (`refusal`, default the runtime's
    `Prompts.search_budget_spent`, what `SearchEnvironment` returns past `max_searches`).

    A refused call retrieved nothing, so it is not a search the reward charges for; the policy
    still pays for it in the turn it wasted. A tool turn is a refusal when its text, stripped,
    is exactly the notice.
    """
    notice = (refusal if refusal is not None else _default_refusal()).strip()
    messages = _as_messages(completion)
    calls = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
    refused = sum(
        1 for m in messages if m.get("role") == "tool" and content_text(m.get("content")).strip() == notice
    )
    return max(0, calls - refused)


@functools.cache
def _default_refusal() -> str:
    return Prompts().search_budget_spent


def final_report(completion: Any) -> Report | None:
    """The report of the final assistant turn, or None (no `<answer>`, or the turn still calls a tool).

    Only the last assistant turn counts: an `<answer>` written next to a search call, or in an
    earlier turn, is not a report (the runtime would have executed the search).
    """
    turns = [m for m in _as_messages(completion) if m.get("role") == "assistant"]
    if not turns or turns[-1].get("tool_calls"):
        return None
    return parse_report(content_text(turns[-1].get("content")))


def _aliases(reference: str | Sequence[str] | None) -> list[str]:
    if reference is None:
        return []
    if isinstance(reference, str):
        return [reference]
    return [r for r in reference if r]


def _question(prompt: Any) -> str:
    """The sub-query: the last user message of a conversational prompt (or the prompt text)."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content") or "" for m in prompt or [] if m.get("role") == "user"]
    return users[-1] if users else ""


@dataclass
class ScoredCompletion:
    """What the reward saw in one completion (also the source of the logged metrics)."""

    tool_calls: int
    report: Report | None
    score: float  # answer score in [0, 1] (0 without a report)
    reward: float

    @property
    def format_ok(self) -> bool:
        return self.report is not None


class _CLPBase:
    """Shared scoring and logging; subclasses decide how an answer is scored."""

    metric: str
    formula: Literal["clp", "additive", "linear"] = "clp"

    def __init__(
        self,
        eps: float = DEFAULT_EPS,
        metric_prefix: str = "executor",
        grounding_score: float | None = None,
    ):
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.eps = eps
        self.metric_prefix = metric_prefix
        self.__name__ = f"clp_{self.metric}"  # TRL names the logged column `rewards/<__name__>/mean`
        check_grounding_score(grounding_score, self.__name__)
        self.grounding_score = grounding_score
        self.last: list[ScoredCompletion] = []

    def _finish(
        self, parsed: list[tuple[int, Report | None]], scores: list[float], kwargs: dict
    ) -> list[float]:
        self.last = [
            ScoredCompletion(
                calls,
                report,
                score,
                grounded(self._shape(score, calls), calls, self.grounding_score),
            )
            for (calls, report), score in zip(parsed, scores, strict=True)
        ]
        log_metric = kwargs.get("log_metric")
        if log_metric is not None and self.last:
            n = len(self.last)
            p = self.metric_prefix
            log_metric(f"{p}/tool_calls", sum(s.tool_calls for s in self.last) / n)
            log_metric(f"{p}/correct", sum(s.score >= 1.0 for s in self.last) / n)
            log_metric(f"{p}/answer_score", sum(s.score for s in self.last) / n)
            log_metric(f"{p}/format_ok", sum(s.format_ok for s in self.last) / n)
        return [s.reward for s in self.last]

    def _shape(self, score: float, calls: int) -> float:
        if self.formula == "additive":
            return additive_reward(score, calls, self.eps)
        if self.formula == "linear":
            return linear_reward(score, calls, self.eps)
        return clp_reward(score, calls, self.eps)

    @staticmethod
    def _parse(completions: Sequence[Any]) -> list[tuple[int, Report | None]]:
        return [(count_tool_calls(c), final_report(c)) for c in completions]

    @staticmethod
    def _references(reference: Sequence[Any] | None, n: int) -> list[list[str]]:
        if reference is None:
            raise ValueError(
                "the CLP reward needs a `reference` column (the sub-query's verified answers); "
                "build the dataset with executor_sft.grpo.grpo_examples_from_rollouts"
            )
        if len(reference) != n:
            raise ValueError(f"`reference` has {len(reference)} entries for {n} completions")
        return [_aliases(r) for r in reference]


class CLPReward(_CLPBase):
    """TRL reward function: CLP over EM (default) or token F1 against `reference`.

    Logs (through TRL's `log_metric`, averaged per logging step): `executor/tool_calls`
    (mean tool calls per completion), `executor/correct` (share with answer score 1),
    `executor/answer_score` (mean EM/F1) and `executor/format_ok` (share with a report).
    """

    def __init__(
        self,
        metric: Literal["em", "f1"] = "em",
        eps: float = DEFAULT_EPS,
        metric_prefix: str = "executor",
        grounding_score: float | None = None,
        formula: Literal["clp", "additive", "linear"] = "clp",
    ):
        if metric not in ("em", "f1"):
            raise ValueError(f"metric must be 'em' or 'f1' (use JudgeCLPReward for a judge), got {metric!r}")
        if formula not in ("clp", "additive", "linear"):
            raise ValueError(f"formula must be 'clp', 'additive' or 'linear', got {formula!r}")
        self.metric = metric
        self.formula = formula
        self._score = exact_match if metric == "em" else f1_score
        super().__init__(eps, metric_prefix, grounding_score)
        if formula != "clp":
            self.__name__ = formula

    def __call__(self, prompts=None, completions=(), reference=None, **kwargs: Any) -> list[float]:
        parsed = self._parse(completions)
        refs = self._references(reference, len(parsed))
        scores = [
            self._score(report.answer, gold) if report is not None and gold else 0.0
            for (_, report), gold in zip(parsed, refs, strict=True)
        ]
        return self._finish(parsed, scores, kwargs)


class JudgeCLPReward(_CLPBase):
    """TRL reward function (async): CLP over a judge's verdict (True = 1, False/None = 0).

    `judge(question, golden_answers, prediction)` may be sync or async; calls for one batch run
    concurrently (sync judges in threads). The question is the `sub_query` column when present,
    else the prompt's last user message.
    """

    metric = "judge"

    def __init__(
        self,
        judge: Any,
        eps: float = DEFAULT_EPS,
        metric_prefix: str = "executor",
        max_concurrency: int = 16,
        grounding_score: float | None = None,
    ):
        method = getattr(judge, "judge", None)
        if not callable(judge) and callable(method):
            judge = method  # an LLMJudge-like object
        if not callable(judge):
            raise TypeError(f"judge must be callable or have a .judge method, got {type(judge).__name__}")
        self.judge = judge
        # async def functions / bound methods, or objects whose class defines `async def __call__`
        self._judge_is_async = inspect.iscoroutinefunction(judge) or inspect.iscoroutinefunction(
            type(judge).__call__
        )
        self.max_concurrency = max_concurrency
        super().__init__(eps, metric_prefix, grounding_score)

    async def _verdict(
        self, sem: asyncio.Semaphore, question: str, gold: list[str], prediction: str
    ) -> float:
        async with sem:
            try:
                if self._judge_is_async:
                    verdict = await self.judge(question, gold, prediction)
                else:
                    verdict = await asyncio.to_thread(self.judge, question, gold, prediction)
                    if inspect.isawaitable(verdict):
                        verdict = await verdict
            except (ChatError, ChatRefused) as exc:  # a step cannot wait for a resume: no verdict, no reward
                logger.warning("judge call failed, reward 0: %s", exc)
                verdict = None
        return 1.0 if verdict is True else 0.0

    async def __call__(self, prompts=None, completions=(), reference=None, **kwargs: Any) -> list[float]:
        parsed = self._parse(completions)
        refs = self._references(reference, len(parsed))
        sub_queries = kwargs.get("sub_query") or [_question(p) for p in (prompts or [""] * len(parsed))]
        sem = asyncio.Semaphore(self.max_concurrency)

        async def one(i: int) -> float:
            report = parsed[i][1]
            if report is None or not refs[i]:
                return 0.0
            return await self._verdict(sem, sub_queries[i], refs[i], report.answer)

        scores = list(await asyncio.gather(*(one(i) for i in range(len(parsed)))))
        return self._finish(parsed, scores, kwargs)

    def score_sync(self, **kwargs: Any) -> list[float]:
        """Run the async reward outside an event loop (for scripts and tests)."""
        return run_async(self(**kwargs))


def _metric_clp(metric: str, doc: str, *, grounded_default: bool) -> Callable[..., CLPReward]:
    """The registered factory of CLP over one answer metric (its keyword arguments are the options)."""
    name = f"clp_{metric}_grounded" if grounded_default else f"clp_{metric}"
    default = DEFAULT_GROUNDING_SCORE if grounded_default else None

    def factory(
        eps: float = DEFAULT_EPS,
        metric_prefix: str = "executor",
        grounding_score: float | None = default,
    ) -> CLPReward:
        reward = CLPReward(metric, eps, metric_prefix, grounding_score)
        reward.__name__ = name
        return reward

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = doc
    return REWARDS.register(name, factory)


clp_em = _metric_clp(
    "em",
    "The blog's CLP over exact match against `reference` (the teacher's verified answers).",
    grounded_default=False,
)
clp_f1 = _metric_clp(
    "f1", "The blog's CLP over token F1 against `reference` (partial credit).", grounded_default=False
)
clp_em_grounded = _metric_clp(
    "em",
    "CLP over exact match, a report given without a search scoring grounding_score x R (ours).",
    grounded_default=True,
)
clp_f1_grounded = _metric_clp(
    "f1",
    "CLP over token F1, a report given without a search scoring grounding_score x R (ours).",
    grounded_default=True,
)


@REWARDS.register("clp_judge")
def clp_judge(
    judge: JudgeFn | Any,
    eps: float = DEFAULT_EPS,
    metric_prefix: str = "executor",
    max_concurrency: int = 16,
    grounding_score: float | None = None,
) -> JudgeCLPReward:
    """The blog's CLP over a judge's verdict; `judge` is the run's configured judge unless given."""
    return JudgeCLPReward(judge, eps, metric_prefix, max_concurrency, grounding_score)


@REWARDS.register("clp_judge_grounded")
def clp_judge_grounded(
    judge: JudgeFn | Any,
    eps: float = DEFAULT_EPS,
    metric_prefix: str = "executor",
    max_concurrency: int = 16,
    grounding_score: float | None = DEFAULT_GROUNDING_SCORE,
) -> JudgeCLPReward:
    """CLP over a judge's verdict, a report without a search scoring grounding_score x R (ours)."""
    reward = JudgeCLPReward(judge, eps, metric_prefix, max_concurrency, grounding_score)
    reward.__name__ = "clp_judge_grounded"
    return reward


@REWARDS.register("additive")
def additive(
    metric: Literal["em", "f1"] = "em",
    alpha: float = DEFAULT_ADDITIVE_ALPHA,
    metric_prefix: str = "executor",
    grounding_score: float | None = None,
) -> CLPReward:
    """The blog's additive comparison reward `score + alpha / (1 + tool_calls)` over EM or F1."""
    return CLPReward(metric, alpha, metric_prefix, grounding_score, formula="additive")


@REWARDS.register("linear")
def linear(
    metric: Literal["em", "f1"] = "em",
    eps: float = DEFAULT_LINEAR_EPS,
    metric_prefix: str = "executor",
    grounding_score: float | None = None,
) -> CLPReward:
    """The blog's linear multiplicative comparison reward `score * (1 - eps * tool_calls)` over EM or F1."""
    return CLPReward(metric, eps, metric_prefix, grounding_score, formula="linear")
