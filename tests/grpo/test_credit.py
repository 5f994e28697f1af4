"""The credit rules and both reweightings against per-token weights computed by hand."""

from __future__ import annotations

import math

import pytest

from executor_sft.grpo.credit import (
    CREDITS,
    AgentTokens,
    Rollout,
    group_normalize,
    rollout_weight_sums,
    shared_advantages,
    token_weights,
)


def batch() -> list[Rollout]:
    """Two questions, two rollouts each, plus one rollout past a limit (out of the loss).

    q1/a: reward 1, lead (1 + 2 tokens), sub-agents at positions 0 (4 tokens) and 1 (2 + 2).
    q1/b: reward 0, lead (5), one sub-agent at position 0 (1 + 1 + 1 + 1 + 1 + 1).
    q2/a: reward 0.25, two sub-agents (10; 6); q2/b: reward 0.75, one sub-agent (8).
    q2/c: reward 1, out of the loss.
    """
    return [
        Rollout("q1", 1.0, [
            AgentTokens("lead", [1, 2]),
            AgentTokens("executor", [4], reward=1.0, position=0),
            AgentTokens("executor", [2, 2], reward=0.0, position=1),
        ]),
        Rollout("q1", 0.0, [
            AgentTokens("lead", [5]),
            AgentTokens("executor", [1] * 6, reward=0.0, position=0),
        ]),
        Rollout("q2", 0.25, [
            AgentTokens("executor", [10], reward=1.0, position=0),
            AgentTokens("executor", [6], reward=0.0, position=1),
        ]),
        Rollout("q2", 0.75, [AgentTokens("executor", [8], reward=1.0, position=0)]),
        Rollout("q2", 1.0, [AgentTokens("executor", [3], reward=1.0, position=0)], in_loss=False),
    ]  # fmt: skip


def test_group_normalize_is_mean_over_sample_std():
    a = group_normalize([1.0, 0.0, 0.25, 0.75], ["q1", "q1", "q2", "q2"])
    s1, s2 = math.sqrt(0.5), math.sqrt(0.125)  # sample std (n - 1) of each pair
    assert a == pytest.approx(
        [0.5 / (s1 + 1e-4), -0.5 / (s1 + 1e-4), -0.25 / (s2 + 1e-4), 0.25 / (s2 + 1e-4)]
    )
    assert group_normalize([3.0, 3.0], ["g", "g"]) == [0.0, 0.0]  # zero variance: no signal


def test_shared_advantage_leaves_out_rollouts_past_a_limit():
    assert shared_advantages(batch(), scale=False) == pytest.approx([0.5, -0.5, -0.25, 0.25, 0.0])


def test_shared_credit_gives_every_agent_the_rollouts_advantage():
    got = CREDITS.get("shared")(batch(), False)
    assert got[0] == [0.5] * 3 and got[1] == [-0.5] * 2 and got[2] == [-0.25] * 2 and got[3] == [0.25]
    assert got[4] == [0.0]


def test_substitution_credit_normalises_each_position_in_its_group():
    got = CREDITS.get("substitution")(batch(), False)
    # q1 position 0: rewards 1 (a) and 0 (b) -> +0.5 / -0.5; q1 position 1: only (a)'s 0 -> 0.
    # the leads keep the shared advantage; q2 position 0: 1 and 1 -> 0, 0; position 1: alone -> 0.
    assert got[0] == pytest.approx([0.5, 0.5, 0.0])
    assert got[1] == pytest.approx([-0.5, -0.5])
    assert got[2] == pytest.approx([0.0, 0.0])
    assert got[3] == pytest.approx([0.0])
    assert got[4] == [0.0]


@pytest.mark.parametrize(
    ("token_level", "agent_level", "hand"),
    [
        # both: A / (agent tokens) / (agents)
        (
            True,
            True,
            [[[0.5 / 3 / 3] * 2, [0.5 / 4 / 3], [0.5 / 4 / 3] * 2], [[-0.5 / 5 / 2], [-0.5 / 6 / 2] * 6]],
        ),
        # token-level only: A / (agent tokens)
        (True, False, [[[0.5 / 3] * 2, [0.5 / 4], [0.5 / 4] * 2], [[-0.5 / 5], [-0.5 / 6] * 6]]),
        # agent-level only: A / (agents)
        (False, True, [[[0.5 / 3] * 2, [0.5 / 3], [0.5 / 3] * 2], [[-0.5 / 2], [-0.5 / 2] * 6]]),
        # neither: A on every token
        (False, False, [[[0.5] * 2, [0.5], [0.5] * 2], [[-0.5], [-0.5] * 6]]),
    ],
)
def test_token_weights_by_hand(token_level, agent_level, hand):
    rollouts = batch()
    w = token_weights(
        rollouts, CREDITS.get("shared")(rollouts, False), token_level=token_level, agent_level=agent_level
    )
    for got, want in zip(w[:2], hand, strict=True):
        for g, h in zip(got, want, strict=True):
            assert g == pytest.approx(h)
    assert w[4] == [[0.0]]  # out of the loss: no weight


def test_weight_sums_match_the_definitions():
    """Sum over a rollout's tokens: both reweightings -> A; token-level -> A x agents;
    agent-level -> A x tokens / agents; neither -> A x tokens."""
    rollouts = batch()
    adv = CREDITS.get("shared")(rollouts, True)
    a = shared_advantages(rollouts)
    agents = [3, 2, 2, 1]
    tokens = [11, 11, 16, 8]
    sums = {
        (t, g): rollout_weight_sums(rollouts, token_weights(rollouts, adv, token_level=t, agent_level=g))
        for t in (True, False)
        for g in (True, False)
    }
    for i in range(4):
        assert sums[True, True][i] == pytest.approx(a[i])
        assert sums[True, False][i] == pytest.approx(a[i] * agents[i])
        assert sums[False, True][i] == pytest.approx(a[i] * tokens[i] / agents[i])
        assert sums[False, False][i] == pytest.approx(a[i] * tokens[i])
    assert all(s[4] == 0.0 for s in sums.values())


def test_substitution_sums_per_agent():
    """Under substitution with both reweightings each agent's tokens sum to its own advantage / agents."""
    rollouts = batch()
    adv = CREDITS.get("substitution")(rollouts, False)
    w = token_weights(rollouts, adv, token_level=True, agent_level=True)
    for r, ws, advs in zip(rollouts[:4], w[:4], adv[:4], strict=True):
        for agent, turns, a in zip(r.agents, ws, advs, strict=True):
            total = sum(x * n for x, n in zip(turns, agent.turn_tokens, strict=True))
            assert total == pytest.approx(a / len(r.agents))


def test_agents_without_trained_tokens_do_not_count():
    r = Rollout("g", 1.0, [AgentTokens("lead", []), AgentTokens("executor", [2], reward=1.0, position=0)])
    w = token_weights([r], [[1.0, 1.0]], token_level=True, agent_level=True)
    assert w == [[[], [0.5]]]


def test_a_credit_rule_from_one_file_is_named_by_its_import_path(tmp_path, monkeypatch):
    """`credit: module:attr` picks a user's rule: (rollouts, scale) -> an advantage per agent."""
    from executor_sft.agents.config import PipelineConfig
    from executor_sft.grpo.marl import MARLSettings

    (tmp_path / "my_credit.py").write_text(
        "def by_length(rollouts, scale=True):\n"
        "    return [[r.reward * a.n_tokens for a in r.agents] for r in rollouts]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = MARLSettings(pipeline=PipelineConfig(), credit="my_credit:by_length")
    rollouts = batch()
    advantages = CREDITS.get(settings.credit)(rollouts, True)
    assert advantages == [[r.reward * a.n_tokens for a in r.agents] for r in rollouts]
    assert any(a for per_rollout in advantages for a in per_rollout)
