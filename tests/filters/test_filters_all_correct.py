"""The `all_correct` ablation baseline (naive distillation): every correct student or teacher run."""

from __future__ import annotations

import pytest
from filters_helpers import episode, run

from executor_sft.filters import (
    ALL_CORRECT,
    FilterConfig,
    classify_episode,
    filter_episodes,
)
from tests.support.doubles import assistant, tool_call


def decide(runs, **cfg) -> dict[str, str]:
    return {
        d.run.run_id: d.stratum or d.reason
        for d in classify_episode(episode("e1", runs), FilterConfig(**cfg))
    }


def test_keeps_every_correct_run_whatever_the_searches_and_counterfactuals():
    runs = [
        run("s1", "student", 1),
        run("s2", "student", 2, sub_query_index=1),  # the paper strata: student_multi_search
        run("t1", "teacher", 1),  # the paper strata: teacher_single_covered
        run("t2", "teacher", 2, sub_query_index=2),
        run("cf", "teacher_budget1", 1, sub_query_index=2, counterfactual_of="t2"),  # correct re-run
        run("t0", "teacher", 0, sub_query_index=3),  # answered without searching
    ]
    default = decide(runs)
    assert default["s2"] == "student_multi_search"
    assert default["t1"] == "teacher_single_covered"
    assert default["t2"] == "counterfactual_correct"
    assert decide(runs, strata=[ALL_CORRECT]) == {
        "s1": ALL_CORRECT,
        "s2": ALL_CORRECT,
        "t1": ALL_CORRECT,
        "t2": ALL_CORRECT,
        "cf": "counterfactual_role",
        "t0": ALL_CORRECT,
    }


def test_uses_the_filters_correctness_and_quality_rules():
    runs = [
        run("wrong", "teacher", 2, em=0.0),
        run("judge_null", "teacher", 1, judge=None, sub_query_index=1),
        run("no_report", "student", 1, finish="turn_budget", sub_query_index=2),
        run("other", "backbone", 1, sub_query_index=3),
    ]
    assert decide(runs, strata=[ALL_CORRECT]) == {
        "wrong": "wrong_em",
        "judge_null": "judge_null",
        "no_report": "not_report",
        "other": "role_not_trained",
    }
    assert decide(runs, strata=[ALL_CORRECT], require_judge=False)["judge_null"] == ALL_CORRECT
    bad = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        assistant("", [tool_call("search", {"query": ""}, "c0")]),
        {"role": "tool", "tool_call_id": "c0", "content": "Doc 1 (Title: x) y"},
        assistant("<answer>a</answer><evidence>e</evidence>"),
    ]
    assert decide([run("c", "student", 1, messages=bad)], strata=[ALL_CORRECT]) == {"c": "corrected_turn"}


def test_rows_and_report_name_the_baseline_stratum():
    ep = episode("e1", [run("s", "student", 2), run("t", "teacher", 2, sub_query_index=1)])
    result = filter_episodes([ep], FilterConfig(strata=[ALL_CORRECT]))
    assert [r["stratum"] for r in result.rows] == [ALL_CORRECT, ALL_CORRECT]
    assert result.report["strata"] == {
        ALL_CORRECT: {"records": 2, "unique_questions": 1, "by_role": {"student": 1, "teacher": 1}}
    }


@pytest.mark.parametrize(
    "strata", [[ALL_CORRECT, "single_search"], ["all_correct", "info_gain_multi_search"]]
)
def test_is_selected_alone(strata):
    with pytest.raises(ValueError, match="alone"):
        FilterConfig(strata=strata)


def test_is_not_a_default_stratum():
    assert ALL_CORRECT not in FilterConfig().strata
