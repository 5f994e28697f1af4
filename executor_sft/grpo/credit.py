"""Credit for multi-agent rollouts: who gets which advantage, and how much each token weighs.

A multi-agent rollout is one GRPO sample: the lead's turns, every sub-agent trajectory, the final
answer. Two credit rules give each agent of a rollout its advantage (`CREDITS`):

- `shared` (WideSeek-R1, Sec. 3): the rollout's outcome reward, normalised within its group
  (the rollouts of one question), is the advantage of every agent and every token of it;
- `substitution` (ours, `grpo/outcome.py`): each sub-agent's advantage is its own
  substitution outcome (its report in place of a reference report, every other finding fixed),
  normalised among the sub-agents at the same position of the group's rollouts; the lead, which
  has no substitution, keeps the rollout's shared advantage.

Then two optional reweightings (WideSeek-R1, Sec. 3) turn an agent's advantage A into each of
its trained tokens' weight: token-level divides by the agent's trained tokens over all its turns
(A is averaged over its tokens and turns), agent-level divides by the rollout's number of trained
agents. With both, a rollout's token weights sum to its advantage, whatever its agents and
lengths. Everything here is pure Python over plain numbers, so it is tested against hand sums.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from executor_sft.registry import Registry

GROUP_EPS = 1e-4
"""Added to a group's standard deviation before dividing (TRL's GRPO adds the same)."""


@dataclass
class AgentTokens:
    """One trained agent of a rollout: its role, its trained tokens per turn, its own reward.

    `reward` is the agent's substitution outcome (None for the lead, or where there is none);
    `position` is where its sub-query sits among the rollout's findings (None for the lead)."""

    role: str
    turn_tokens: list[int]
    reward: float | None = None
    position: int | None = None

    @property
    def n_tokens(self) -> int:
        return sum(self.turn_tokens)


@dataclass
class Rollout:
    """One multi-agent rollout: its group (the question it answers), outcome reward and agents.

    `in_loss` False (past a context or turn limit, `grpo.rollout_failures`) keeps it out of its
    group's statistics and gives every token weight 0."""

    group: Hashable
    reward: float
    agents: list[AgentTokens] = field(default_factory=list)
    in_loss: bool = True


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1, as TRL's `torch.std`); std 0 for one value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def group_normalize(
    rewards: Sequence[float], groups: Sequence[Hashable], *, scale: bool = True, eps: float = GROUP_EPS
) -> list[float]:
    """(r - group mean) / (group std + eps) for each reward (`scale` False: r - group mean)."""
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, groups, strict=True):
        by_group[g].append(r)
    stats = {g: _mean_std(v) for g, v in by_group.items()}
    out = []
    for r, g in zip(rewards, groups, strict=True):
        mean, std = stats[g]
        out.append((r - mean) / (std + eps) if scale else r - mean)
    return out


def shared_advantages(rollouts: Sequence[Rollout], *, scale: bool = True) -> list[float]:
    """Each rollout's group-normalised outcome advantage (0 for rollouts out of the loss)."""
    kept = [i for i, r in enumerate(rollouts) if r.in_loss]
    normalized = group_normalize(
        [rollouts[i].reward for i in kept], [rollouts[i].group for i in kept], scale=scale
    )
    out = [0.0] * len(rollouts)
    for i, a in zip(kept, normalized, strict=True):
        out[i] = a
    return out


CreditRule = Callable[[Sequence[Rollout], bool], list[list[float]]]
"""(rollouts, scale) -> one advantage per agent of each rollout, in the rollouts' agent order."""

CREDITS: Registry[CreditRule] = Registry("credit rule")


@CREDITS.register("shared")
def shared_credit(rollouts: Sequence[Rollout], scale: bool = True) -> list[list[float]]:
    """WideSeek-R1's rule: every agent of a rollout gets the rollout's shared advantage."""
    adv = shared_advantages(rollouts, scale=scale)
    return [[a] * len(r.agents) for a, r in zip(adv, rollouts, strict=True)]


@CREDITS.register("substitution")
def substitution_credit(rollouts: Sequence[Rollout], scale: bool = True) -> list[list[float]]:
    """Ours: a sub-agent's own substitution reward, normalised among the sub-agents at its
    position in its group; an agent without one (the lead) gets the rollout's shared advantage."""
    shared = shared_advantages(rollouts, scale=scale)
    slots = [
        (i, j)
        for i, r in enumerate(rollouts)
        if r.in_loss
        for j, agent in enumerate(r.agents)
        if agent.reward is not None and agent.position is not None
    ]
    normalized = group_normalize(
        [rollouts[i].agents[j].reward for i, j in slots],  # type: ignore[misc]
        [(rollouts[i].group, rollouts[i].agents[j].position) for i, j in slots],
        scale=scale,
    )
    own = dict(zip(slots, normalized, strict=True))
    return [
        [own.get((i, j), shared[i]) if r.in_loss else 0.0 for j in range(len(r.agents))]
        for i, r in enumerate(rollouts)
    ]


def token_weights(
    rollouts: Sequence[Rollout],
    agent_advantages: Sequence[Sequence[float]],
    *,
    token_level: bool = True,
    agent_level: bool = True,
) -> list[list[list[float]]]:
    """Per rollout, per agent, per turn: the weight of each of that turn's trained tokens.

    weight = A_agent x (1 / the agent's trained tokens, if `token_level`) x (1 / the rollout's
    trained agents, if `agent_level`); 0 for a rollout out of the loss."""
    out = []
    for rollout, advantages in zip(rollouts, agent_advantages, strict=True):
        agents = [a for a in rollout.agents if a.n_tokens > 0]
        per_rollout = []
        for agent, adv in zip(rollout.agents, advantages, strict=True):
            w = adv if rollout.in_loss and agent.n_tokens > 0 else 0.0
            if w and token_level:
                w /= agent.n_tokens
            if w and agent_level:
                w /= len(agents)
            per_rollout.append([w] * len(agent.turn_tokens))
        out.append(per_rollout)
    return out


def rollout_weight_sums(
    rollouts: Sequence[Rollout], weights: Sequence[Sequence[Sequence[float]]]
) -> list[float]:
    """Sum over each rollout's tokens of their weights (what the reweighting definitions fix)."""
    return [
        sum(
            w * n
            for agent, turns in zip(r.agents, ws, strict=True)
            for w, n in zip(turns, agent.turn_tokens, strict=True)
        )
        for r, ws in zip(rollouts, weights, strict=True)
    ]
