"""The rollout-failure rules, one trajectory built to trip each."""

from __future__ import annotations

from executor_sft.grpo.rollout_failures import (
    CONTEXT_LIMIT,
    INVALID_FORMAT,
    OK,
    REPETITION,
    TURN_LIMIT,
    AgentTrace,
    CallTrace,
    FailureRules,
    failure_counts,
)


def agent(finish="report", calls=None, queries=()):
    return AgentTrace("student", finish, calls or [CallTrace(100, [1, 2, 3])], list(queries))


def test_each_rule():
    rules = FailureRules(max_context_tokens=200)
    assert rules.classify([agent()]) == OK
    assert rules.classify([agent(calls=[CallTrace(190, list(range(20)))])]) == CONTEXT_LIMIT
    assert rules.classify([agent(calls=[CallTrace(10, [1, 2], stopped=False)])]) == CONTEXT_LIMIT
    assert rules.classify([agent(), agent(finish="turn_budget")]) == TURN_LIMIT
    assert rules.classify([agent(finish="invalid")]) == INVALID_FORMAT
    assert rules.classify([agent(queries=["Where is Orla?", "where is  orla?"])]) == REPETITION
    assert rules.classify([agent(calls=[CallTrace(10, [5, 6, 7, 8] * 10)])]) == REPETITION
    assert rules.classify([agent(calls=[CallTrace(10, list(range(40)))])]) == OK


def test_limits_leave_the_loss_and_formats_are_penalised():
    rules = FailureRules(failure_reward=-0.5, exclude_turn_limit=False, cut_is_context_limit=False)
    assert rules.classify([agent(finish="turn_budget")]) == TURN_LIMIT  # counted, and kept in the loss
    assert rules.in_loss(TURN_LIMIT) and not FailureRules().in_loss(TURN_LIMIT)
    assert not rules.in_loss(CONTEXT_LIMIT) and rules.in_loss(OK) and rules.in_loss(REPETITION)
    assert rules.classify([agent(finish="turn_budget"), agent(finish="invalid")]) == INVALID_FORMAT
    assert FailureRules().classify([agent(finish="turn_budget"), agent(finish="invalid")]) == TURN_LIMIT
    assert rules.classify([agent(calls=[CallTrace(10, [1], stopped=False)])]) == OK
    assert rules.reward(INVALID_FORMAT, 1.0) == rules.reward(REPETITION, 1.0) == -0.5
    assert rules.reward(OK, 0.75) == 0.75


def test_summary_counts_every_rule():
    assert failure_counts([OK, TURN_LIMIT, TURN_LIMIT, REPETITION]) == {
        CONTEXT_LIMIT: 0, TURN_LIMIT: 2, INVALID_FORMAT: 0, REPETITION: 1,
    }  # fmt: skip
