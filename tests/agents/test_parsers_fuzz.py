"""Every parser classifies arbitrary input and never raises."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from executor_sft.agents.calls import normalize_assistant
from executor_sft.agents.parsing import (
    classify_executor_reply,
    parse_final_answer,
    parse_report,
    parse_subqueries,
    parse_tool_arguments,
)
from executor_sft.llm.parsing import strip_think
from executor_sft.metrics.judge import parse_verdict
from executor_sft.schema import Report

TAGS = [
    "<answer>",
    "</answer>",
    "<evidence>",
    "</evidence>",
    "<search>",
    "</search>",
    "<subquery>",
    "</subquery>",
    "<stop/>",
    "<think>",
    "</think>",
    "True",
    "false",
    "{",
    "}",
    '"query"',
    "\n",
]
# Text biased towards the markers the parsers look for, so the interesting branches get hit.
text = st.lists(st.one_of(st.sampled_from(TAGS), st.text(max_size=12)), max_size=20).map("".join)
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | text,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["query", "name", "function", "arguments", "id"]) | st.text(max_size=5),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {"content": st.one_of(text, st.none(), st.integers())},
    optional={
        "tool_calls": st.one_of(json_like, st.lists(json_like, max_size=3)),
        "reasoning_content": json_like,
    },
)


@settings(max_examples=150, deadline=None)
@given(text)
def test_text_parsers_never_raise(s):
    assert isinstance(strip_think(s), str)
    r = parse_report(s)
    assert r is None or (isinstance(r, Report) and r.answer.strip())
    d = parse_subqueries(s, max_parallel=3)
    assert len(d.sub_queries) <= 3 and d.stop == (not d.sub_queries) and d.dropped >= 0
    assert all(q.strip() for q in d.sub_queries)
    assert isinstance(parse_final_answer(s), str)
    assert parse_verdict(s) in (True, False, None)


@settings(max_examples=150, deadline=None)
@given(message, st.sampled_from(["native", "tag"]), st.booleans(), st.sampled_from([None, True, False]))
@example({"content": "", "tool_calls": [{"function": {"name": ["search"]}}]}, "native", True, None)
def test_executor_reply_always_classified(msg, protocol, search_allowed, other_allowed):
    callable_now = {"search": search_allowed} | ({} if other_allowed is None else {"name": other_allowed})
    action = classify_executor_reply(msg, protocol, callable_now)
    assert action.kind in ("call", "report", "malformed")
    if action.kind == "call":
        assert action.calls
        for call in action.calls:  # of several parallel calls, each may carry its own problem
            assert (call.tool is None) == (call.problem is not None)
            assert call.tool is None or callable_now[call.tool]
        assert len(action.calls) > 1 or action.calls[0].problem is None
        if protocol == "tag":
            (call,) = action.calls
            assert call.tool == "search" and call.arguments["query"].strip()
    if action.kind == "report":
        assert action.report is not None
    if action.kind == "malformed":
        assert action.problem


@settings(max_examples=100, deadline=None)
@given(json_like)
def test_tool_arguments_and_normalisation_never_raise(args):
    arguments, problem = parse_tool_arguments(args)
    assert (arguments is None) != (problem is None)
    assert arguments is None or isinstance(arguments, dict)
    msg = normalize_assistant({"content": args, "tool_calls": [args] if args is not None else None})
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    for call in msg.get("tool_calls", []):
        assert isinstance(call["function"]["arguments"], str) and call["id"]
    # Normalising again changes nothing (records are stable).
    assert normalize_assistant(msg) == msg
