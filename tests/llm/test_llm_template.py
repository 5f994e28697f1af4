"""The project's ChatML tools template (SmolLM2): clean layout and an exact assistant mask."""

from __future__ import annotations

import json

import pytest

from executor_sft.agents.tools import SEARCH_TOOL
from tests.support.doubles import tool_call

OTHER_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up a title.",
        "parameters": {"type": "object", "properties": {}},
    },
}

CONVERSATION = [
    {"role": "system", "content": "You are a search agent."},
    {"role": "user", "content": "Who directed Jaws?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [tool_call("search", {"query": "Jaws director"}, "c1")],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "Doc 1 (Title: Jaws) Directed by Steven Spielberg."},
    {
        "role": "assistant",
        "content": "Two checks.",
        "tool_calls": [
            tool_call("search", {"query": "Spielberg"}, "c2"),
            tool_call("lookup", {}, "c3"),
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "Doc 1 (Title: Spielberg) Film director."},
    {"role": "tool", "tool_call_id": "c3", "content": "none"},
    {"role": "assistant", "content": "<answer>Steven Spielberg</answer><evidence>Doc 1</evidence>"},
]


@pytest.fixture(scope="module")
def tok(smollm2):
    return smollm2[1]


def test_system_and_tools_layout(tok):
    text = tok.apply_chat_template(CONVERSATION[:2], tools=[SEARCH_TOOL, OTHER_TOOL], tokenize=False)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou are a search agent.\n\nYou can call these functions.")
    tools_block = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    lines = tools_block.split("\n")
    assert [json.loads(line) for line in lines] == [SEARCH_TOOL, OTHER_TOOL]  # one tool JSON per line
    # Without a system message there is no stray blank line before the preamble.
    bare = tok.apply_chat_template(CONVERSATION[1:2], tools=[SEARCH_TOOL], tokenize=False)
    assert bare.startswith("<|im_start|>system\nYou can call these functions.")
    # Without tools: a plain ChatML system turn.
    plain = tok.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert plain == (
        "<|im_start|>system\nYou are a search agent.<|im_end|>\n"
        "<|im_start|>user\nWho directed Jaws?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_turns_render_cleanly(tok):
    text = tok.apply_chat_template(CONVERSATION, tools=[SEARCH_TOOL], tokenize=False)
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "search", "arguments": {"query": "Jaws director"}}</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1 (Title: Jaws) Directed by Steven Spielberg.\n"
        "</tool_response><|im_end|>\n"
    ) in text
    assert (
        '<|im_start|>assistant\nTwo checks.\n<tool_call>{"name": "search", "arguments": {"query": "Spielberg"}}'
        '</tool_call>\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call><|im_end|>\n'
    ) in text
    # Consecutive tool results share one user turn.
    assert "</tool_response>\n<tool_response>\nnone\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<answer>Steven Spielberg</answer><evidence>Doc 1</evidence><|im_end|>\n")
    assert "\n\n\n" not in text


def test_assistant_mask_is_exact(tok):
    out = tok.apply_chat_template(
        CONVERSATION, tools=[SEARCH_TOOL], return_dict=True, return_assistant_tokens_mask=True, tokenize=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    spans, current = [], []
    for token, bit in zip(ids, mask, strict=True):
        if bit:
            current.append(token)
        elif current:
            spans.append(tok.decode(current))
            current = []
    if current:
        spans.append(tok.decode(current))
    assert spans == [
        '<tool_call>{"name": "search", "arguments": {"query": "Jaws director"}}</tool_call><|im_end|>',
        'Two checks.\n<tool_call>{"name": "search", "arguments": {"query": "Spielberg"}}</tool_call>\n'
        '<tool_call>{"name": "lookup", "arguments": {}}</tool_call><|im_end|>',
        "<answer>Steven Spielberg</answer><evidence>Doc 1</evidence><|im_end|>",
    ]
    # Everything unmasked (system, user, tool results, role headers) decodes to the rest.
    unmasked = tok.decode([t for t, bit in zip(ids, mask, strict=True) if not bit])
    assert "Directed by Steven Spielberg" in unmasked and "Who directed Jaws?" in unmasked
    assert "<tool_call>" not in unmasked.split("</tools>")[1]
