"""Hybrid deep + wide batches: every batch holds the configured share of each kind."""

from __future__ import annotations

import pytest

from executor_sft.errors import ConfigError
from executor_sft.grpo.hybrid import HybridRepeatSampler, deep_count, hybrid_batches


def test_the_seeds_batch_is_64_deep_and_64_wide():
    is_wide = [i % 2 == 1 for i in range(256)]
    batches = hybrid_batches(is_wide, 128, 0.5)
    assert len(batches) == 2
    for b in batches:
        assert sum(not is_wide[i] for i in b) == 64 and sum(is_wide[i] for i in b) == 64
    assert len({i for b in batches for i in b}) == 256  # nothing repeated within an epoch


@pytest.mark.parametrize(("share", "deep"), [(0.25, 2), (0.75, 6), (1.0, 8), (0.0, 0)])
def test_any_share(share, deep):
    is_wide = [i >= 20 for i in range(40)]
    for b in hybrid_batches(is_wide, 8, share, seed=3):
        assert sum(not is_wide[i] for i in b) == deep == deep_count(8, share)


def test_sampler_repeats_each_question_as_a_group_and_reshuffles_per_epoch():
    is_wide = [i % 3 == 0 for i in range(12)]  # 4 wide, 8 deep
    sampler = HybridRepeatSampler(is_wide, batch_size=2, num_generations=3, deep_share=0.5, seed=0)
    first, second = list(sampler), list(sampler)
    assert len(first) == len(sampler) == 4 * 2 * 3
    for epoch in (first, second):
        groups = [epoch[i : i + 3] for i in range(0, len(epoch), 3)]
        assert all(len(set(g)) == 1 for g in groups)
        batches = [[g[0] for g in groups[i : i + 2]] for i in range(0, len(groups), 2)]
        assert all(sorted(is_wide[i] for i in b) == [False, True] for b in batches)
    assert first != second


def test_a_share_the_data_cannot_fill_is_a_config_error():
    with pytest.raises(ConfigError, match="wide"):
        hybrid_batches([False] * 10, 4, 0.5)
    with pytest.raises(ConfigError, match="deep_share"):
        deep_count(4, 1.5)


def test_a_sampler_set_to_an_epoch_draws_that_epoch_as_the_uninterrupted_one_does():
    """A resumed run builds a new sampler; the Trainer's `set_epoch` gives it the epoch it stopped in."""
    is_wide = [i % 3 == 0 for i in range(12)]
    running = HybridRepeatSampler(is_wide, batch_size=2, num_generations=3, deep_share=0.5, seed=0)
    epochs = [list(running) for _ in range(3)]
    assert epochs[2] not in epochs[:2]
    resumed = HybridRepeatSampler(is_wide, batch_size=2, num_generations=3, deep_share=0.5, seed=0)
    resumed.set_epoch(2)
    assert list(resumed) == epochs[2]
    running.set_epoch(1)  # what the Trainer calls before each epoch, uninterrupted too
    assert list(running) == epochs[1]


def test_a_pool_of_one_deep_and_one_wide_question_at_32_generations_is_one_64_rollout_step_an_epoch():
    """bench/marl_credit.py's pool run at --generations 32 --questions_per_step 2: each epoch is one
    step of two groups of 32, the deep question's then the wide one's."""
    sampler = HybridRepeatSampler([False, True], batch_size=2, num_generations=32, deep_share=0.5)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert len(sampler) == 64 and list(sampler) == [0] * 32 + [1] * 32
