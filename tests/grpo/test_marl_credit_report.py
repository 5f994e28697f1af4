"""bench/marl_credit.py's verdict: step-to-step changes with Welch intervals, and the noise reading only
where it was measured at the run's size."""

from __future__ import annotations

import pytest
from script_modules import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/marl_credit.py")


def test_step_changes_compare_step_one_with_the_best_and_the_last_step(bench):
    log = [{"rewards": [0.0, 0.0, 0.0, 1.0]}, {"rewards": [1.0, 1.0, 1.0, 0.0]}, {"rewards": [0.0, 1.0, 0.0, 1.0]}]
    highest, last = bench.step_changes("shared", log)
    assert "step 1 0.250, highest (picked after the fact) at step 2 0.750: +0.500" in highest
    assert "last at step 3 0.500: +0.250" in last and "4 and 4 rollouts" in last
    # the best step being the last gives one line; one step gives none
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
