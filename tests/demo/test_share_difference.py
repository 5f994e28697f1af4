"""share_difference: the mechanism statistic of bench/demo_ablation.py, on hand-computed cases."""

import pytest

from bench.probing.share_difference import share_difference


def test_diff_is_the_share_over_all_runs():
    # a: 2 + 4 of 8 runs, b: 1 of 8 runs -> 6/8 - 1/8.
    d = share_difference([[1, 1, 0, 0], [1, 1, 1, 1]], [[0, 0, 0, 1], [0, 0, 0, 0]])
    assert d.diff == pytest.approx(0.625)
    assert d.n_items == (2, 2) and d.n_runs == (8, 8)


def test_interval_collapses_when_every_item_has_the_same_share():
    d = share_difference([[1, 0]] * 5, [[0, 0]] * 3)
    assert d.diff == pytest.approx(0.5) and d.ci95 == pytest.approx((0.5, 0.5))


def test_interval_is_the_percentiles_of_the_enumerable_bootstrap():
    # a always 1; b resamples to share 0 (1/4), 0.5 (1/2) or 1 (1/4): diff in {1, 0.5, 0},
    # so the 2.5th and 97.5th percentiles are 0 and 1.
    d = share_difference([[1], [1]], [[0], [1]])
    assert d.diff == pytest.approx(0.5) and d.ci95 == pytest.approx((0.0, 1.0))


def test_repeated_runs_of_one_item_do_not_narrow_the_interval():
    # 16 items, half of them always 1 over 4 runs: the bootstrap over items has the width of
    # 16 draws (1.96 * 2 * sqrt(0.25 / 16) = 0.49), not of 64 independent runs (0.245).
    a = [[1, 1, 1, 1]] * 8 + [[0, 0, 0, 0]] * 8
    d = share_difference(a, [[0, 0, 0, 0]] * 16)
    lo, hi = d.ci95
    assert d.diff == pytest.approx(0.5) and lo < 0.5 < hi
    assert 0.4 < hi - lo < 0.6
    assert share_difference(a, [[0, 0, 0, 0]] * 16).ci95 == d.ci95  # seeded


def test_empty_groups_are_refused():
    with pytest.raises(ValueError):
        share_difference([], [[1]])
    with pytest.raises(ValueError):
        share_difference([[1], []], [[1]])
