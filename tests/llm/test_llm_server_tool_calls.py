"""Tool calls in our server's answers, as OpenAI gives them, read with the `openai` client over
real HTTP on 127.0.0.1: `parallel_tool_calls: false` keeps the first call only (OpenAI's
contract; vLLM's `maybe_filter_parallel_tool_calls`), and a message that is only tool calls has
`content: null`. The model is scripted: none of the offline models emits two calls on cue."""

from __future__ import annotations

import json

import openai
import pytest

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm.server import BackgroundServer, create_app
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

USER = [{"role": "user", "content": "Who directed Jaws, and who wrote the novel?"}]
TWO_CALLS = [
    tool_call("search", {"query": "Jaws director"}, "call_a"),
    tool_call("search", {"query": "Jaws novel author"}, "call_b"),
]


@pytest.fixture(scope="module")
def client():
    def reply(messages, tools):
        said = messages[-1]["content"]
        return assistant("Let me look both up." if "say" in said else "", [dict(c) for c in TWO_CALLS])

    model = ScriptedChatModel(default=reply, name="served")
    with BackgroundServer(create_app(model)) as server:
        yield openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def ask(client, messages=USER, **extra):
    return client.chat.completions.create(model="served", messages=messages, tools=[SEARCH_TOOL], **extra)


def test_parallel_tool_calls_false_keeps_only_the_first_call(client):
    (choice,) = ask(client, parallel_tool_calls=False).choices
    (call,) = choice.message.tool_calls
    assert (
        call.id == "call_a"
        and call.function.name == "search"
        and json.loads(call.function.arguments) == {"query": "Jaws director"}
    )
    assert choice.finish_reason == "tool_calls"


@pytest.mark.parametrize("extra", [{}, {"parallel_tool_calls": True}], ids=["absent", "true"])
def test_parallel_tool_calls_true_or_absent_keeps_every_call(client, extra):
    calls = ask(client, **extra).choices[0].message.tool_calls
    assert [json.loads(c.function.arguments)["query"] for c in calls] == [
        "Jaws director",
        "Jaws novel author",
    ]
    assert [c.id for c in calls] == ["call_a", "call_b"]


def test_a_message_of_tool_calls_only_has_null_content(client):
    raw = ask(client).model_dump()["choices"][0]["message"]
    assert raw["content"] is None and len(raw["tool_calls"]) == 2
    with_text = ask(client, messages=[{"role": "user", "content": "say what you do"}]).choices[0].message
    assert with_text.content == "Let me look both up." and len(with_text.tool_calls) == 2


def test_parallel_tool_calls_that_is_not_a_boolean_gets_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, extra_body={"parallel_tool_calls": "sometimes"})
    assert caught.value.body["param"] == "parallel_tool_calls"
