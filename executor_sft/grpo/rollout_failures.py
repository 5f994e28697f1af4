"""Rollout failures of multi-agent GRPO (WideSeek-R1, App. A, "Training Procedure").

A rollout past the context or turn limit leaves the loss; an invalid format or repetition is
penalised (its reward becomes `failure_reward`). The seed names the rules, not their numbers or
detectors, so these are ours: context = a trained call whose prompt plus completion passes
`max_context_tokens`, or whose completion was cut at its token cap (no end-of-turn token);
turn limit = a trained sub-agent that ended on its turn budget (or, with a trained lead, the lead
on its round budget); invalid format = a trained agent whose replies the runtime could not parse;
repetition = a trained agent that searched the same query twice, or a completion whose distinct
n-grams fall under `min_distinct_ngrams` of its n-grams.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

OK = "ok"
CONTEXT_LIMIT = "context_limit"
TURN_LIMIT = "turn_limit"
INVALID_FORMAT = "invalid_format"
REPETITION = "repetition"
FAILURES = (CONTEXT_LIMIT, TURN_LIMIT, INVALID_FORMAT, REPETITION)


@dataclass
class CallTrace:
    """One trained model call: prompt length, sampled ids, and whether it stopped on end-of-turn."""

    prompt_tokens: int
    completion_ids: list[int]
    stopped: bool = True


@dataclass
class AgentTrace:
    """What the rules read of one trained agent: `finish` as `ExecutorRun.finish` (the lead:
    "turn_budget" when it used every round, "invalid" when its call failed)."""

    role: str
    finish: str
    calls: list[CallTrace] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)


@dataclass
class FailureRules:
    max_context_tokens: int | None = None
    exclude_turn_limit: bool = True
    failure_reward: float = -1.0
    ngram: int = 4
    min_distinct_ngrams: float = 0.3
    min_ngram_tokens: int = 32
    """Completions shorter than this are never called repetitive."""
    cut_is_context_limit: bool = True
    """A completion cut at its token cap (no end-of-turn token) counts as past the context limit."""

    def classify(self, agents: Sequence[AgentTrace]) -> str:
        """The first failure that applies (limits that leave the loss before formats), or `OK`.

        A turn limit kept in the loss (`exclude_turn_limit` off) comes after the formats, so a
        rollout that also broke the format is penalised; it is still counted as a turn limit."""
        calls = [c for a in agents for c in a.calls]
        if (self.cut_is_context_limit and any(not c.stopped for c in calls)) or (
            self.max_context_tokens is not None
            and any(c.prompt_tokens + len(c.completion_ids) > self.max_context_tokens for c in calls)
        ):
            return CONTEXT_LIMIT
        turn_limit = any(a.finish == "turn_budget" for a in agents)
        if self.exclude_turn_limit and turn_limit:
            return TURN_LIMIT
        if any(a.finish == "invalid" for a in agents):
            return INVALID_FORMAT
        if any(repeats(a.queries) for a in agents) or any(self.degenerate(c.completion_ids) for c in calls):
            return REPETITION
        return TURN_LIMIT if turn_limit else OK

    def in_loss(self, status: str) -> bool:
        """Past the context limit never; past a turn limit unless `exclude_turn_limit` is off."""
        return status != CONTEXT_LIMIT and (status != TURN_LIMIT or not self.exclude_turn_limit)

    def degenerate(self, ids: Sequence[int]) -> bool:
        if len(ids) < max(self.min_ngram_tokens, self.ngram):
            return False
        grams = [tuple(ids[i : i + self.ngram]) for i in range(len(ids) - self.ngram + 1)]
        return len(set(grams)) / len(grams) < self.min_distinct_ngrams

    def reward(self, status: str, reward: float) -> float:
        """The reward after the rules: penalised failures get `failure_reward`."""
        return self.failure_reward if status in (INVALID_FORMAT, REPETITION) else reward


def repeats(queries: Sequence[str]) -> bool:
    """The same (whitespace- and case-normalised) query searched twice."""
    counts = Counter(" ".join(q.lower().split()) for q in queries)
    return any(n > 1 for n in counts.values())


def failure_counts(statuses: Sequence[str]) -> dict[str, int]:
    """How many rollouts each rule caught (every rule listed, 0 included)."""
    counts = Counter(statuses)
    return {name: counts.get(name, 0) for name in FAILURES}
