"""bench/marl_credit.py's verdict: step-to-step changes with Welch intervals, and the noise reading only
where it was measured at the run's size."""

from __future__ import annotations

import pytest
from script_modules import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/marl_credit.py")


def test_step_changes_compare_step_one_with_the_first_update_the_best_and_the_last_step(bench):
    log = [
        {"rewards": [0.0, 0.0, 0.0, 1.0]},
        {"rewards": [0.0, 1.0, 0.0, 0.0]},
        {"rewards": [1.0, 1.0, 1.0, 0.0]},
        {"rewards": [0.0, 1.0, 0.0, 1.0]},
    ]
    first, highest, last = bench.step_changes("shared", log)
    assert "step 1 0.250, after one update at step 2 0.250: +0.000" in first
    assert "highest (picked after the fact) at step 3 0.750: +0.500" in highest
    assert "last at step 4 0.500: +0.250" in last and "4 and 4 rollouts" in last
    # a step that is several of these is given once: two steps give one line; one step gives none
    assert len(bench.step_changes("shared", log[:3])) == 2
    assert len(bench.step_changes("shared", log[:2])) == 1 and bench.step_changes("shared", log[:1]) == []


def test_the_noise_reading_is_given_only_for_a_run_of_the_size_it_was_measured_at(bench):
    import json

    noise = json.loads(bench.NOISE.read_text())
    measured = noise["settings"]["questions_per_step"] * noise["settings"]["generations"]
    flat = [{"reward": 0.1, "reward_std": 0.0}] * 3

    def results(generations):
        settings = {"questions_per_step": 1, "generations": generations}
        return {"settings": settings, "arms": {"shared": {"steps": flat, "heldout": None}}}

    assert any("why no reward rose" in line for line in bench.verdict(results(measured)))
    assert not any("why no reward rose" in line for line in bench.verdict(results(measured * 8)))


def test_keep_turn_limit_keeps_those_rollouts_in_the_loss_and_out_of_the_arm_identity(bench, tmp_path):
    from executor_sft.grpo.rollout_failures import TURN_LIMIT, FailureRules

    args = bench.parser().parse_args(["--sft", "x", "--keep_turn_limit"])
    kept = bench.script_args(tmp_path, "shared", args)
    default = bench.script_args(tmp_path, "shared", bench.parser().parse_args(["--sft", "x"]))
    assert (kept.exclude_turn_limit, default.exclude_turn_limit) == (False, True)
    assert FailureRules(exclude_turn_limit=kept.exclude_turn_limit).in_loss(TURN_LIMIT)
    assert "keep_turn_limit" not in bench.arm_identity(args)  # the multi-agent record holds it


def test_keep_cut_replies_judges_a_cut_reply_by_its_format_and_outcome(bench, tmp_path):
    from executor_sft.grpo.rollout_failures import (
        CONTEXT_LIMIT,
        INVALID_FORMAT,
        OK,
        AgentTrace,
        CallTrace,
        FailureRules,
    )

    args = bench.parser().parse_args(["--sft", "x", "--keep_cut_replies"])
    kept = bench.script_args(tmp_path, "shared", args)
    default = bench.script_args(tmp_path, "shared", bench.parser().parse_args(["--sft", "x"]))
    assert (kept.cut_is_context_limit, default.cut_is_context_limit) == (False, True)
    cut = CallTrace(prompt_tokens=10, completion_ids=[1, 2, 3], stopped=False)
    parsed, unparsed = AgentTrace("executor", "report", [cut]), AgentTrace("executor", "invalid", [cut])
    rules = FailureRules(cut_is_context_limit=kept.cut_is_context_limit)
    assert FailureRules().classify([parsed]) == CONTEXT_LIMIT
    assert (rules.classify([parsed]), rules.classify([unparsed])) == (OK, INVALID_FORMAT)
    assert rules.in_loss(rules.classify([unparsed])) and rules.reward(INVALID_FORMAT, 0.5) == -1.0
    assert "keep_cut_replies" not in bench.arm_identity(args)  # the multi-agent record holds it


def test_question_rewards_average_each_group_in_batch_order(bench):
    entry = {
        "rewards": [1.0, 0.0, 0.5, 0.25, 1.0, 0.75],
        "groups": [[0, 1], [0, 1], [0, 0], [0, 0], [0, 1], [0, 0]],
    }
    assert bench.question_rewards(entry) == [2 / 3, 0.5]


def test_arm_differences_compare_the_arms_step_by_step_over_the_steps_both_logged(bench):
    shared = {"episode_log": [{"rewards": [0.0, 1.0, 0.0, 1.0]}, {"rewards": [1.0, 1.0, 0.0, 1.0]}]}
    substitution = {"episode_log": [{"rewards": [0.0, 1.0, 1.0, 1.0]}]}
    (line,) = bench.arm_differences({"shared": shared, "substitution": substitution})
    assert line.startswith(
        "- step 1, substitution minus shared: mean rollout reward 0.750 against 0.500, +0.250"
    )
    assert line.endswith("4 and 4 rollouts) (the same weights: sampling alone)")
    assert bench.arm_differences({"shared": shared}) == []


def test_pool_lines_compare_each_arm_with_before_and_the_two_rules_with_each_other(bench):
    pool = {"pool": ["q1", "q2"], "scores": {"q1": [0.0, 0.0], "q2": [0.0, 1.0]}}
    arms = {
        "shared": {"pool_after": {"q1": [1.0, 1.0], "q2": [0.0, 1.0]}},
        "substitution": {"pool_after": {"q1": [0.0, 1.0], "q2": [0.0, 0.0]}},
    }
    lines = bench.pool_lines({"pool": pool, "arms": arms})
    assert lines[0].endswith("sampled F1 before training 0.250")
    assert "shared: sampled F1 after 0.750, minus before +0.500" in lines[1]
    assert "substitution: sampled F1 after 0.250, minus before +0.000" in lines[2]
    assert "substitution minus shared after training: -0.500" in lines[3] and "4 and 4 episodes" in lines[3]
    assert len(bench.pool_lines({"pool": pool, "arms": {"shared": arms["shared"]}})) == 2
    assert "gold passage" not in "".join(lines)  # a run that did not measure it says nothing of it
    pool["found"] = {"q1": [1.0, 0.5], "q2": [None, 1.0]}
    arms["shared"]["pool_after_found"] = {"q1": [0.0, 0.0], "q2": [0.0, 0.5]}
    lines = bench.pool_lines({"pool": pool, "arms": arms})
    assert lines[0].endswith("found a gold passage in 0.83 of its runs (q1 0.75, q2 1.00)")
    assert lines[1].endswith("found a gold passage in 0.12 of its runs (q1 0.00, q2 0.25)")
    assert "gold passage" not in lines[2]
    arms["none"] = {"pool_after": pool["scores"], "pool_after_found": pool["found"]}
    line = next(x for x in bench.pool_lines({"pool": pool, "arms": arms}) if "shared minus none" in x)
    assert "found a gold passage -0.71" in line and "3 and 4 episodes" in line  # None: no run to count


def test_the_winner_is_the_rule_every_interval_that_excludes_zero_favours(bench):
    pool = {"pool": ["q1"], "scores": {"q1": [0.0] * 8}}

    def held(f1s):
        return {"per_question": [{"id": f"h{i}", "f1": v, "em": v} for i, v in enumerate(f1s)]}

    def results(shared_pool, sub_pool, shared_held, sub_held):
        arms = {
            "shared": {"pool_after": {"q1": shared_pool}, "heldout": held(shared_held)},
            "substitution": {"pool_after": {"q1": sub_pool}, "heldout": held(sub_held)},
        }
        return {"pool": pool, "arms": arms}

    spread = [0.0, 1.0] * 4
    (line,) = bench.winner_line(results(spread, spread, [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0]))
    assert line.startswith("- which rule won: neither (every interval spans 0). Substitution minus shared: ")
    assert "the pool's sampled F1 after training +0.000" in line and "held-out F1 +0.000" in line
    ones, zeros = [1.0, 1.0, 1.0, 0.9] * 2, [0.0, 0.0, 0.1, 0.0] * 2
    (line,) = bench.winner_line(results(zeros, ones, [0.0] * 4, [0.0] * 4))
    assert line.startswith("- which rule won: substitution. ")
    (line,) = bench.winner_line(results(ones, zeros, [0.0] * 4, [0.0] * 4))
    assert line.startswith("- which rule won: shared. ")
    (line,) = bench.winner_line(results(ones, zeros, [0.0, 0.1, 0.0, 0.1], [1.0, 0.9, 1.0, 0.9]))
    assert line.startswith("- which rule won: the measures disagree. ")
    assert bench.winner_line({"arms": {"shared": {"heldout": held([0.0])}}}) == []


def test_an_interval_on_a_difference_of_shares_stays_within_minus_one_and_one(bench):
    before, after = [1.0] * 15 + [0.6], [0.0] * 15 + [0.4]  # the 64-rollout run's shape: -0.91
    plain, shares = bench.welch(before, after), bench.welch(before, after, shares=True)
    assert plain["low"] < -1.0  # what a t-interval gives on bounded data
    assert shares["low"] == -1.0 and shares["high"] == plain["high"] and shares["mean"] == plain["mean"]
