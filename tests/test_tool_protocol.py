"""Issue 41, point 4: one tool-protocol check at every stage boundary (`executor_sft.tool_protocol`).

The executor corrects a reply whose calls share an id; the filter excludes a recorded run that
breaks the protocol; SFT refuses such a row with one `file:line` error, before any model loads.
This file: the check itself; tests/agents/test_executor_tool_protocol.py,
tests/filters/test_filters_tool_protocol.py and tests/sft/test_sft_tool_protocol.py: each stage.
"""

from __future__ import annotations

import json

import pytest

from executor_sft.tool_protocol import first_problem
from tests.support.doubles import assistant, tool_call


def _conversation():
    call = tool_call("search", {"query": "a"}, "call_1")
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        assistant(tool_calls=[call, tool_call("search", {"query": "b"}, "call_2")]),
        {"role": "tool", "tool_call_id": "call_2", "content": "b"},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
        {"role": "user", "content": "notice"},
        assistant("<answer>x</answer>"),
    ]


def _shared_id(m):
    m[2]["tool_calls"][1]["id"] = "call_1"
    m[3]["tool_call_id"] = "call_1"


def _list_arguments(m):
    m[2]["tool_calls"][0]["function"]["arguments"] = json.dumps([1, 2])


def _no_tool_call_id(m):
    m[3].pop("tool_call_id")


def _unanswered(m):
    del m[4]


def _answered_twice(m):
    m.insert(5, dict(m[4]))


def _no_id(m):
    m[2]["tool_calls"][0].pop("id")


@pytest.mark.parametrize(
    ("break_messages", "problem"),
    [
        (
            _shared_id,
            "messages[2].tool_calls[1] repeats the id 'call_1': every call of a turn needs its own id",
        ),
        (_list_arguments, "messages[2].tool_calls[0].function.arguments is not a JSON object"),
        (_no_tool_call_id, "messages[3] is a tool message without a tool_call_id"),
        (_unanswered, "messages[2].tool_calls[0] ('call_1') has no tool message answering it"),
        (_answered_twice, "messages[5].tool_call_id 'call_1' answers no open call of the turn before it"),
        (_no_id, "messages[2].tool_calls[0] has no id"),
    ],
)
def test_each_break_is_named_with_its_message(break_messages, problem):
    messages = _conversation()
    assert first_problem(messages) is None  # parallel calls, answered in any order
    break_messages(messages)
    assert first_problem(messages) == problem


def test_a_recorded_run_may_end_on_calls_its_failed_tool_never_answered():
    messages = _conversation()[:3]
    assert first_problem(messages, open_end=True) is None
    assert first_problem(messages) is not None


def test_a_huge_id_is_not_echoed():
    messages = _conversation()
    messages[2]["tool_calls"][1]["id"] = messages[2]["tool_calls"][0]["id"] = "x" * 100_000
    assert len(first_problem(messages)) < 200
