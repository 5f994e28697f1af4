"""`CallResult.as_dict()` (the executor's fast path) is exactly `record.model_dump(mode="json")`."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from executor_sft.agents.calls import call_model
from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm.base import ChatResult
from executor_sft.schema import TokenUsage, Usage

text = st.text(max_size=20)
usages = st.one_of(
    st.builds(TokenUsage, prompt_tokens=st.integers(0, 9999), completion_tokens=st.integers(0, 999)),
    st.builds(
        lambda p, c: TokenUsage(prompt_tokens=p, completion_tokens=c, counted_by="estimate"),
        st.integers(0, 99),
        st.integers(0, 99),
    ),
    st.fixed_dictionaries({"prompt_tokens": st.integers(0, 99), "completion_tokens": st.integers(0, 99)}),
)
replies = st.one_of(
    st.fixed_dictionaries({"content": st.one_of(text, st.none())}),
    st.fixed_dictionaries(
        {
            "content": text,
            "reasoning_content": text,
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "function": st.fixed_dictionaries(
                            {"name": text, "arguments": st.dictionaries(text, text)}
                        )
                    }
                ),
                max_size=2,
            ),
        }
    ),
    text,
)


class Backend:
    name = "double"

    def __init__(self, reply, usage, latency, model, fail):
        self.reply, self.usage, self.latency, self.model, self.fail = reply, usage, latency, model, fail

    async def chat(self, messages, tools=None, sampling=None):
        if self.fail:  # a backend's own failure on this request is recorded (an outage raises)
            raise ValueError("prompt longer than the engine's context")
        return ChatResult(message=self.reply, usage=self.usage, latency_s=self.latency, model=self.model)


@settings(max_examples=150, deadline=None)
@given(
    reply=replies,
    usage=usages,
    latency=st.one_of(st.floats(0, 100, allow_nan=False), st.integers(0, 5)),
    model=st.sampled_from(["served-name", ""]),
    tools=st.sampled_from([None, [SEARCH_TOOL]]),
    fail=st.booleans(),
    history=st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "tool"]), "content": text}), max_size=3
    ),
)
def test_as_dict_is_the_records_json_dump(reply, usage, latency, model, tools, fail, history):
    messages = [{"role": "system", "content": "s"}, *history]
    result = asyncio.run(call_model(Backend(reply, usage, latency, model, fail), messages, tools))
    fast = result.as_dict()
    slow = result.record.model_dump(mode="json")
    assert json.dumps(fast) == json.dumps(slow)  # same values and the same key order
    assert (result.message is None) == fail and result.usage.prompt_tokens == slow["usage"]["prompt_tokens"]


def test_usage_add_counts_calls_from_every_usage_kind():
    """`Usage.add` reads `calls` without pydantic's missing-attribute path; the totals are unchanged."""
    total = Usage()
    total.add(TokenUsage(prompt_tokens=3, completion_tokens=1))  # one call
    total.add(TokenUsage(prompt_tokens=1, completion_tokens=1, calls=4))  # a backend that batched
    total.add(Usage(prompt_tokens=2, completion_tokens=2, calls=2))
    assert (total.prompt_tokens, total.completion_tokens, total.calls) == (6, 4, 7)
