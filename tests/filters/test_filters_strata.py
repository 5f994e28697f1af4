"""Every inclusion and exclusion rule of the two strata (docs/filters.md, "Rules")."""

from __future__ import annotations

import pytest
from filters_helpers import as_dicts, episode, run

from executor_sft.filters import (
    INFO_GAIN_MULTI_SEARCH,
    SINGLE_SEARCH,
    EpisodeContext,
    FilterConfig,
    classify_episode,
    filter_episodes,
    info_gain_multi_search,
    parse_episode,
    single_search,
)
from tests.support.doubles import assistant, tool_call


def decide(runs, **cfg) -> dict[str, str]:
    """run_id -> stratum (kept) or exclusion reason."""
    return {
        d.run.run_id: d.stratum or d.reason
        for d in classify_episode(episode("e1", runs), FilterConfig(**cfg))
    }


def test_student_single_search_always_kept():
    assert decide([run("s", "student", 1)]) == {"s": SINGLE_SEARCH}


def test_student_multi_search_excluded_with_reason():
    assert decide([run("s", "student", 2)]) == {"s": "student_multi_search"}


def test_teacher_single_uncovered_kept():
    out = decide([run("s", "student", 1, em=0.0), run("t", "teacher", 1)])
    assert out == {"s": "wrong_em", "t": SINGLE_SEARCH}


@pytest.mark.parametrize("student_searches", [1, 2])
def test_teacher_single_covered_by_any_correct_student(student_searches):
    out = decide([run("s", "student", student_searches), run("t", "teacher", 1)])
    assert out["t"] == "teacher_single_covered"


def test_teacher_single_all_mode_keeps_covered():
    out = decide([run("s", "student", 1), run("t", "teacher", 1)], teacher_single="all")
    assert out == {"s": SINGLE_SEARCH, "t": SINGLE_SEARCH}


def test_coverage_is_per_sub_query():
    runs = [
        run("s0", "student", 1, sub_query_index=0),
        run("t0", "teacher", 1, sub_query_index=0),
        run("t1", "teacher", 1, sub_query_index=1),
        run("t2", "teacher", 1, round=1, sub_query_index=0),
    ]
    out = decide(runs)
    assert out == {
        "s0": SINGLE_SEARCH,
        "t0": "teacher_single_covered",
        "t1": SINGLE_SEARCH,
        "t2": SINGLE_SEARCH,
    }


def test_coverage_uses_the_same_correctness_rule():
    # a student run with a null judge does not cover under require_judge, does without it
    runs = [run("s", "student", 1, judge=None), run("t", "teacher", 1)]
    assert decide(runs)["t"] == SINGLE_SEARCH
    assert decide(runs, require_judge=False) == {"s": SINGLE_SEARCH, "t": "teacher_single_covered"}


def test_info_gain_kept_when_counterfactual_wrong():
    runs = [run("t", "teacher", 2), run("b", "teacher_budget1", 1, em=0.0, counterfactual_of="t")]
    assert decide(runs) == {"t": INFO_GAIN_MULTI_SEARCH, "b": "counterfactual_role"}


def test_info_gain_counterfactual_correct_excluded():
    runs = [run("t", "teacher", 2), run("b", "teacher_budget1", 1, counterfactual_of="t")]
    assert decide(runs) == {"t": "counterfactual_correct", "b": "counterfactual_role"}


def test_info_gain_no_counterfactual_excluded():
    # a budget-1 run linked to another run does not count
    runs = [run("t", "teacher", 2), run("b", "teacher_budget1", 1, em=0.0, counterfactual_of="other")]
    assert decide(runs)["t"] == "no_counterfactual"
    assert decide([run("t", "teacher", 3)])["t"] == "no_counterfactual"


@pytest.mark.parametrize("finish", ["turn_budget", "invalid", "error"])
def test_counterfactual_that_failed_to_report_is_not_correct(finish):
    # even with an outcome that would otherwise count as correct
    runs = [run("t", "teacher", 2), run("b", "teacher_budget1", 0, finish=finish, counterfactual_of="t")]
    assert decide(runs)["t"] == INFO_GAIN_MULTI_SEARCH


def test_counterfactual_with_em_1_and_no_verdict_is_not_a_failure():
    # unknown is not failure: the two-search run is not kept as information gain
    runs = [run("t", "teacher", 2), run("b", "teacher_budget1", 1, judge=None, counterfactual_of="t")]
    assert decide(runs) == {"t": "counterfactual_unjudged", "b": "counterfactual_role"}
    assert decide(runs, require_judge=False)["t"] == "counterfactual_correct"


def test_counterfactual_known_to_fail_despite_a_missing_verdict():
    # EM 0 fails whatever the judge; an unscored re-run (no outcome) is unknown
    wrong = [
        run("t", "teacher", 2),
        run("b", "teacher_budget1", 1, em=0.0, judge=None, counterfactual_of="t"),
    ]
    assert decide(wrong)["t"] == INFO_GAIN_MULTI_SEARCH
    unscored = [run("t", "teacher", 2), run("b", "teacher_budget1", 1, outcome=False, counterfactual_of="t")]
    assert decide(unscored)["t"] == "counterfactual_unjudged"
    # a re-run known to fail beside one with no verdict: still unknown, not kept
    mixed = [*wrong, run("b2", "teacher_budget1", 1, judge=None, counterfactual_of="t")]
    assert decide(mixed)["t"] == "counterfactual_unjudged"


def test_every_counterfactual_must_fail():
    runs = [
        run("t", "teacher", 2),
        run("b1", "teacher_budget1", 1, em=0.0, counterfactual_of="t"),
        run("b2", "teacher_budget1", 1, counterfactual_of="t"),
    ]
    assert decide(runs)["t"] == "counterfactual_correct"


def test_min_searches_threshold():
    runs = [run("t", "teacher", 2), run("b", "teacher_budget1", 1, em=0.0, counterfactual_of="t")]
    assert decide(runs, min_searches=3)["t"] == "below_min_searches"
    runs3 = [run("t", "teacher", 3), run("b", "teacher_budget1", 1, em=0.0, counterfactual_of="t")]
    assert decide(runs3, min_searches=3)["t"] == INFO_GAIN_MULTI_SEARCH


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"finish": "turn_budget"}, "not_report"),
        ({"em": 0.0}, "wrong_em"),
        ({"judge": False}, "judge_false"),
        ({"judge": None}, "judge_null"),
        ({"outcome": False}, "no_outcome"),
    ],
)
@pytest.mark.parametrize(("role", "n"), [("student", 1), ("teacher", 1), ("teacher", 2)])
def test_incorrect_runs_excluded(kwargs, reason, role, n):
    assert decide([run("r", role, n, **kwargs)])["r"] == reason


@pytest.mark.parametrize("kwargs", [{"judge": None}, {"judge": False}])
def test_require_judge_false_accepts_em_alone(kwargs):
    runs = [
        run("s", "student", 1, **kwargs),
        run("t", "teacher", 2, **kwargs),
        run("b", "teacher_budget1", 1, em=0.0, counterfactual_of="t"),
    ]
    assert decide(runs, require_judge=False) == {
        "s": SINGLE_SEARCH,
        "t": INFO_GAIN_MULTI_SEARCH,
        "b": "counterfactual_role",
    }


def test_em_one_with_judge_false_is_not_correct_by_default():
    assert decide([run("s", "student", 1, em=1.0, judge=False)]) == {"s": "judge_false"}


def test_other_roles_and_zero_searches():
    runs = [run("x", "backbone", 1), run("s", "student", 0), run("b", "teacher_budget1", 1)]
    assert decide(runs) == {"x": "role_not_trained", "s": "no_search", "b": "counterfactual_role"}


def test_role_names_configurable():
    runs = [
        run("s", "small", 1),
        run("t", "big", 1),
        run("m", "big", 2),
        run("b", "big_b1", 1, em=0.0, counterfactual_of="m"),
        run("o", "student", 1),
    ]
    out = decide(runs, student_role="small", teacher_role="big", budget1_role="big_b1")
    assert out == {
        "s": SINGLE_SEARCH,
        "t": "teacher_single_covered",
        "m": INFO_GAIN_MULTI_SEARCH,
        "b": "counterfactual_role",
        "o": "role_not_trained",
    }


def test_strata_selection():
    runs = [
        run("s", "student", 1),
        run("t", "teacher", 2),
        run("b", "teacher_budget1", 1, em=0.0, counterfactual_of="t"),
    ]
    assert decide(runs, strata=[SINGLE_SEARCH])["t"] == "stratum_disabled"
    assert decide(runs, strata=[INFO_GAIN_MULTI_SEARCH])["s"] == "stratum_disabled"


def test_corrected_runs_excluded_by_default_and_optionally_kept():
    good = run("t", "teacher", 1).messages
    bad = assistant("", [tool_call("lookup", {"query": "x"}, "bad0")])
    msgs = (
        good[:2]
        + [bad, {"role": "tool", "tool_call_id": "bad0", "content": "Unknown tool; use search."}]
        + good[2:]
    )
    runs = [run("t", "teacher", 1, messages=msgs)]
    assert decide(runs)["t"] == "corrected_turn"
    assert decide(runs, exclude_corrected=False)["t"] == SINGLE_SEARCH
    rows = filter_episodes(as_dicts(episode("e", runs)), FilterConfig(exclude_corrected=False)).rows
    assert [m["role"] for m in rows[0]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]


def test_corrected_run_with_unparseable_arguments_cannot_become_a_row():
    good = run("t", "teacher", 1).messages
    bad = assistant("", [tool_call("search", '{"query": "x', "bad0")])
    msgs = good[:2] + [bad, {"role": "tool", "tool_call_id": "bad0", "content": "Bad JSON."}] + good[2:]
    result = filter_episodes(
        as_dicts(episode("e", [run("t", "teacher", 1, messages=msgs)])), FilterConfig(exclude_corrected=False)
    )
    assert result.rows == []
    assert result.report["exclusions"] == {"unparseable_arguments": 1}


def test_stratum_functions_usable_alone():
    (record,) = as_dicts(
        episode(
            "e",
            [
                run("s", "student", 1),
                run("t", "teacher", 2),
                run("b", "teacher_budget1", 1, em=0, counterfactual_of="t"),
            ],
        )
    )
    ep = parse_episode(record)
    ctx = EpisodeContext.build(ep, FilterConfig())
    s, t, _ = ep.runs
    assert single_search(s, ctx) is None
    assert single_search(t, ctx) == "not_single_search"
    assert info_gain_multi_search(t, ctx) is None
    assert info_gain_multi_search(s, ctx) == "student_multi_search"


def test_every_run_gets_exactly_one_outcome():
    runs = [
        run("s1", "student", 1),
        run("s2", "student", 2),
        run("t1", "teacher", 1),
        run("t2", "teacher", 2),
        run("b2", "teacher_budget1", 1, em=0.0, counterfactual_of="t2"),
        run("t3", "teacher", 2, sub_query_index=1),
        run("x", "student", 1, finish="invalid", sub_query_index=1),
    ]
    result = filter_episodes(as_dicts(episode("e", runs)))
    totals = result.report["totals"]
    assert totals["runs"] == 7
    assert totals["rows"] + totals["excluded"] == totals["runs"]
    assert sorted(r["source_run_id"] for r in result.rows) == ["s1", "t2"]
    assert result.report["exclusions"] == {
        "counterfactual_role": 1,
        "no_counterfactual": 1,
        "not_report": 1,
        "student_multi_search": 1,
        "teacher_single_covered": 1,
    }


def test_config_validation():
    with pytest.raises(ValueError, match="teacher_single"):
        FilterConfig(teacher_single="some")
    with pytest.raises(ValueError, match="unknown filter stratum 'multi'"):
        FilterConfig(strata=["multi"])
    with pytest.raises(ValueError, match="min_searches"):
        FilterConfig(min_searches=1)
    with pytest.raises(ValueError, match="must differ"):
        FilterConfig(student_role="teacher")


def test_the_paper_filter_config_keeps_every_correct_teacher_single_search_run():
    # Sec. 3.4 keeps correct single-search runs of either model: the paper config reads it literally.
    from pathlib import Path

    import yaml

    raw = yaml.safe_load(Path("recipes/configs/filter_paper.yaml").read_text())
    assert FilterConfig(**raw).teacher_single == "all"
    assert FilterConfig().teacher_single == "uncovered"  # ours, the default (docs/filters.md)
