"""Think/tool-call parsers: exact cases, the malformed convention, and fuzzing (never raise)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from executor_sft.llm.parsing import (
    ParsedResponse,
    parse_assistant_text,
    parse_tool_calls,
    prompt_opens_think,
    split_think,
    tool_call_error,
)


def test_split_think_variants():
    assert split_think("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_think("no thinking here") == (None, "no thinking here")
    # The template prefilled "<think>": only the closing tag appears in the output.
    assert split_think("plan</think>answer") == ("plan", "answer")
    assert split_think("plan</think>answer", think_open=True) == ("plan", "answer")
    # Cut off while thinking: everything is reasoning, no answer.
    assert split_think("<think>still going") == ("still going", "")
    # A think tag inside the answer is content, not reasoning.
    assert split_think("answer <think>x</think> more") == (None, "answer <think>x</think> more")
    assert split_think("")[1] == ""


def test_tool_calls_hermes_blocks():
    text = (
        'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "capital of France"}}\n</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"Paris\\"}"}</tool_call>'
    )
    parsed = parse_tool_calls(text)
    assert parsed.content == "Let me look."
    assert parsed.malformed == 0
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["search", "search"]
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"query": "capital of France"}
    assert json.loads(parsed.tool_calls[1]["function"]["arguments"]) == {"query": "Paris"}
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in parsed.tool_calls)
    assert len({c["id"] for c in parsed.tool_calls}) == 2
    assert all(tool_call_error(c) is None for c in parsed.tool_calls)


def test_malformed_tool_calls_are_surfaced():
    bad_json = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>')
    assert bad_json.malformed == 1 and len(bad_json.tool_calls) == 1
    call = bad_json.tool_calls[0]
    assert call["function"]["name"] == "search"  # recovered from the broken body
    assert call["function"]["arguments"] == '{"name": "search", "arguments": {"query": "x"'
    assert "not valid JSON" in tool_call_error(call)

    no_name = parse_tool_calls("<tool_call>just words</tool_call>")
    assert no_name.tool_calls[0]["function"] == {"name": "", "arguments": "just words"}
    assert tool_call_error(no_name.tool_calls[0]) == "tool call has no function name"

    list_args = parse_tool_calls('<tool_call>{"name": "search", "arguments": [1, 2]}</tool_call>')
    assert list_args.malformed == 1 and "not a JSON object" in tool_call_error(list_args.tool_calls[0])

    # Cut off (or "</tool_call>" used as a stop string): a complete body is still a valid call.
    unclosed = parse_tool_calls('Sure <tool_call>{"name": "search", "arguments": {"query": "x"}}')
    assert unclosed.content == "Sure" and unclosed.malformed == 0
    assert unclosed.tool_calls[0]["function"]["name"] == "search"
    truncated = parse_tool_calls('<tool_call>{"name": "search", "argu')
    assert truncated.malformed == 1 and truncated.tool_calls[0]["function"]["name"] == "search"

    empty_args = parse_tool_calls('<tool_call>{"name": "search", "arguments": ""}</tool_call>')
    assert empty_args.malformed == 0 and empty_args.tool_calls[0]["function"]["arguments"] == "{}"


def test_reasoning_is_never_parsed_for_tools():
    text = '<think>maybe <tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call></think>Final.'
    parsed = parse_assistant_text(text)
    assert parsed.tool_calls == [] and parsed.content == "Final."
    assert "<tool_call>" in parsed.reasoning_content
    assert parsed.to_message() == {
        "role": "assistant",
        "content": "Final.",
        "reasoning_content": parsed.reasoning_content,
    }


def test_tools_not_parsed_without_tools():
    text = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    assert parse_assistant_text(text, parse_tools=False).content == text
    assert parse_assistant_text(text).kind == "tool_calls"


def test_prompt_opens_think():
    assert prompt_opens_think("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_think("<|im_start|>assistant\n")


def test_tool_call_error_on_odd_shapes():
    assert tool_call_error({}) == "tool call has no 'function' object"
    assert tool_call_error({"function": {"name": "s", "arguments": {"q": 1}}}) is None
    assert "not a JSON object" in tool_call_error({"function": {"name": "s", "arguments": 3}})


FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "{",
    "}",
    '"name"',
    ":",
    '"search"',
    '"arguments"',
    '{"query": "x"}',
    ",",
    "\n",
    " ",
    "[",
    '"',
    "\\",
    "text",
    "null",
]


def _check(parsed: ParsedResponse) -> None:
    assert parsed.kind in {"content", "tool_calls", "malformed"}
    assert isinstance(parsed.content, str)
    assert parsed.reasoning_content is None or isinstance(parsed.reasoning_content, str)
    bad = 0
    for call in parsed.tool_calls:
        fn = call["function"]
        assert isinstance(fn["name"], str) and isinstance(fn["arguments"], str)
        bad += tool_call_error(call) is not None
    # The malformed count agrees with the agents' check, so "malformed" is never missed.
    assert bad == parsed.malformed
    json.dumps(parsed.to_message())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30), st.booleans(), st.booleans())
def test_fuzz_fragments(parts, parse_tools, think_open):
    _check(parse_assistant_text("".join(parts), parse_tools=parse_tools, think_open=think_open))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.booleans())
def test_fuzz_arbitrary_text(text, think_open):
    _check(parse_assistant_text(text, think_open=think_open))


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=5), c),
        max_leaves=10,
    )
)
def test_fuzz_json_bodies(value):
    parsed = parse_assistant_text(f"<tool_call>{json.dumps(value)}</tool_call>")
    _check(parsed)
    assert len(parsed.tool_calls) == 1
