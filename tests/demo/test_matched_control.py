"""The matched control (a'): (c)'s size and shape, its second searches drawn without the counterfactual test.

Rows come from the committed sample rollouts (data/rollouts.jsonl: the scripted teacher with its
needless-search coin on a real world and BM25 index), filtered by the real filter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.probing.matched import MATCHED_MULTI_SEARCH, matched_control, n_searches
from executor_sft.filters import (
    ALL_CORRECT,
    INFO_GAIN_MULTI_SEARCH,
    FilterConfig,
    filter_episodes,
    iter_episodes_by_id,
)

ROLLOUTS = Path(__file__).resolve().parents[2] / "data" / "rollouts.jsonl"


@pytest.fixture(scope="module")
def rows():
    full = filter_episodes(iter_episodes_by_id(ROLLOUTS), FilterConfig()).rows
    naive = filter_episodes(iter_episodes_by_id(ROLLOUTS), FilterConfig(strata=[ALL_CORRECT])).rows
    return full, naive


def test_the_control_matches_the_full_filter_in_rows_and_two_search_rows(rows):
    full, naive = rows
    control = matched_control(full, naive, seed=0)
    assert len(control) == len(full)
    assert sum(n_searches(r) >= 2 for r in control) == sum(n_searches(r) >= 2 for r in full) > 0
    drawn = [r for r in control if r["stratum"] == MATCHED_MULTI_SEARCH]
    assert len(drawn) == sum(r["stratum"] == INFO_GAIN_MULTI_SEARCH for r in full)
    assert all(r["source_run_id"].endswith("/teacher") and n_searches(r) >= 2 for r in drawn)
    assert [r for r in control if r["stratum"] != MATCHED_MULTI_SEARCH] == [
        r for r in full if r["stratum"] != INFO_GAIN_MULTI_SEARCH
    ]


def test_the_draw_is_blind_to_the_counterfactual_test_and_seeded(rows):
    full, naive = rows
    kept = {r["source_run_id"] for r in full}
    pool = [r for r in naive if n_searches(r) >= 2 and r["source_run_id"].endswith("/teacher")]
    needless = [r for r in pool if r["source_run_id"] not in kept]
    assert needless, "the sample's teacher searches twice without need on some runs"
    draws = [
        {
            r["source_run_id"]
            for r in matched_control(full, naive, seed)
            if r["stratum"] == MATCHED_MULTI_SEARCH
        }
        for seed in range(8)
    ]
    assert any(d - kept for d in draws), "some draws hold two-search runs the counterfactual test rejected"
    assert draws[0] == {
        r["source_run_id"] for r in matched_control(full, naive, 0) if r["stratum"] == MATCHED_MULTI_SEARCH
    }


def test_too_few_two_search_runs_is_an_error(rows):
    full, naive = rows
    with pytest.raises(ValueError, match="multi-search rows wanted"):
        matched_control(full, [r for r in naive if n_searches(r) < 2], seed=0)
