"""Correctness, counterfactual and corrected-turn predicates on dicts and schema models."""

from __future__ import annotations

import pytest
from filters_helpers import conversation, run

from executor_sft.filters import (
    correctness_failure,
    is_correct,
    is_counterfactual,
    malformed_turn,
    needs_correction,
    parse_run,
)
from tests.support.doubles import assistant, tool_call


@pytest.mark.parametrize("as_type", ["model", "dict", "parsed"])
def test_correct_run_accepted_in_every_form(as_type):
    r = run("t1", "teacher")
    obj = {"model": r, "dict": r.model_dump(mode="json"), "parsed": parse_run(r.model_dump(mode="json"))}[
        as_type
    ]
    assert is_correct(obj)
    assert correctness_failure(obj) is None


def test_predicates_are_the_typed_records_rule():
    """The filter's correctness is `ExecutorRun.correctness_failure`, read from a record's dict."""
    for kwargs in ({}, {"judge": None}, {"em": 0.0}, {"finish": "turn_budget"}, {"outcome": False}):
        r = run("t1", "teacher", **kwargs)
        parsed = parse_run(r.model_dump(mode="json"))
        assert correctness_failure(r.model_dump(mode="json")) == r.correctness_failure()
        assert parsed.correctness_failure(require_judge=False) == r.correctness_failure(require_judge=False)


@pytest.mark.parametrize(
    ("kwargs", "strict_reason", "em_only_correct"),
    [
        ({"judge": None}, "judge_null", True),
        ({"judge": False}, "judge_false", True),
        ({"em": 0.0, "judge": True}, "wrong_em", False),
        ({"em": 0.0, "judge": None}, "wrong_em", False),
        ({"finish": "turn_budget"}, "not_report", False),
        ({"finish": "invalid"}, "not_report", False),
        ({"finish": "error"}, "not_report", False),
        ({"outcome": False}, "no_outcome", False),
    ],
)
def test_correctness_rules(kwargs, strict_reason, em_only_correct):
    r = run("t1", "teacher", **kwargs)
    assert correctness_failure(r) == strict_reason
    assert not is_correct(r)
    assert is_correct(r, require_judge=False) is em_only_correct


def test_min_em_threshold():
    r = run("t1", "teacher", em=0.5)
    assert not is_correct(r)
    assert is_correct(r, min_em=0.5)


def test_counterfactual_by_role_or_link():
    assert is_counterfactual(run("b", "teacher_budget1", counterfactual_of="t1"))
    assert is_counterfactual(run("b", "teacher_budget1"))
    assert is_counterfactual(run("b", "other", counterfactual_of="t1"))
    assert not is_counterfactual(run("t", "teacher"))
    assert is_counterfactual(run("b", "cf"), budget1_role="cf")


def _with_turn(bad_turn):
    msgs = conversation("sq", ["q1"], "a")
    # insert a malformed turn and the runtime's correction before the good search
    return msgs[:2] + [bad_turn, {"role": "user", "content": "Please call search or report."}] + msgs[2:]


@pytest.mark.parametrize(
    "bad_turn",
    [
        assistant("", [tool_call("search", '{"query": "unterminated')]),
        assistant("", [tool_call("lookup", {"query": "x"})]),
        assistant("", [tool_call("search", {"q": "x"})]),
        assistant("", [tool_call("search", {"query": "  "})]),
        assistant("", [tool_call("search", {"query": "a"}, "c1"), tool_call("search", {"query": " "}, "c2")]),
        assistant("", [tool_call("search", {"queries": ["a", ""]})]),
        assistant("", [tool_call("open_document", {"doc_id": ""})]),
        assistant("I think the answer is x."),
    ],
    ids=[
        "bad-json",
        "unknown-tool",
        "no-query",
        "empty-query",
        "one-bad-parallel-call",
        "empty-query-in-list",
        "no-doc-id",
        "no-call-no-report",
    ],
)
def test_malformed_turn_detected(bad_turn):
    msgs = _with_turn(bad_turn)
    assert malformed_turn(msgs) == 2
    r = run("t1", "teacher", messages=msgs)
    assert needs_correction(r)


def test_clean_runs_need_no_correction():
    assert malformed_turn(conversation("sq", ["a", "b"], "x")) is None
    assert not needs_correction(run("t1", "teacher", 2))
    tag = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "sq"},
        {"role": "assistant", "content": "<search>who</search>"},
        {"role": "user", "content": "<information>Doc 1 (Title: A) a</information>"},
        {"role": "assistant", "content": "<answer>a</answer>"},
    ]
    assert malformed_turn(tag) is None
    assert not needs_correction(run("t1", "teacher", 1, messages=tag))


def test_refused_call_and_recorded_corrections_count():
    # a well-formed call the runtime refused (budget spent): more search turns than searches
    assert needs_correction(run("t1", "teacher", 1, messages=conversation("sq", ["a", "b"], "x")))
    d = run("t1", "teacher").model_dump(mode="json")
    d["n_corrections"] = 1
    assert needs_correction(d)
    d["n_corrections"] = 0
    assert not needs_correction(d)


def _one_turn(*calls) -> list[dict]:
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "Doc 1 (Title: A) a"} for c in calls]
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "sq"},
        assistant("", list(calls)),
        *results,
        assistant("<answer>a</answer>"),
    ]


def test_parallel_calls_count_one_search_per_query():
    two = _one_turn(tool_call("search", {"query": "a"}, "c1"), tool_call("search", {"query": "b"}, "c2"))
    many = _one_turn(tool_call("search", {"queries": ["a", "b"]}, "c1"))
    opened = _one_turn(
        tool_call("search", {"query": "a"}, "c1"), tool_call("open_document", {"doc_id": "d"}, "c2")
    )
    for messages, searches in ((two, 2), (many, 2), (opened, 1)):
        assert malformed_turn(messages) is None
        assert not needs_correction(run("t1", "teacher", searches, messages=messages))
        # fewer searches recorded than asked: the runtime refused one (past the budget or the cap)
        assert needs_correction(run("t1", "teacher", searches - 1, messages=messages))
