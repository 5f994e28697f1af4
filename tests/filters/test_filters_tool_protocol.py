"""Issue 41, point 4, the filter's boundary: a recorded run that breaks the tool protocol (here
two calls sharing an id, as the executor accepted before) becomes no row: `tool_protocol`."""

from __future__ import annotations

from filters_helpers import episode, run

from executor_sft.filters import filter_episodes


def test_a_run_whose_calls_share_an_id_is_excluded():
    teacher = run("t", "teacher", n_searches=2)
    m = teacher.messages  # system, user, (call, result) x 2, report
    first, second = m[2]["tool_calls"][0], m[4]["tool_calls"][0]
    m[2:6] = [
        {**m[2], "tool_calls": [{**first, "id": "call_1"}, {**second, "id": "call_1"}]},
        {**m[3], "tool_call_id": "call_1"},
        {**m[5], "tool_call_id": "call_1"},
    ]
    budget1 = run("b", "teacher_budget1", n_searches=1, em=0.0, judge=False, counterfactual_of="t")
    result = filter_episodes([episode("e1", [teacher, budget1])])
    assert result.rows == []
    assert result.report["exclusions"]["tool_protocol"] == 1

    m[2]["tool_calls"][1]["id"] = m[4]["tool_call_id"] = "call_2"  # the same run with its own ids
    assert len(filter_episodes([episode("e1", [teacher, budget1])]).rows) == 1
