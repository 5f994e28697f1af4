"""Model doubles for tests and benchmarks that need a specific behaviour.

They implement the real `ChatModel` protocol, so everything downstream (agents, rollout,
store) runs for real; only the text the "model" writes is chosen by the test.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.schema import Message, TokenUsage

Reply = Message | str | Callable[[list[Message], list[dict] | None], Message | str]


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_0") -> dict[str, Any]:
    """An OpenAI-shaped tool call (arguments as a JSON string, or raw text to simulate bad JSON)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def assistant(
    content: str = "", tool_calls: list[dict] | None = None, reasoning: str | None = None
) -> Message:
    msg: Message = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return msg


def _approx_tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj, ensure_ascii=False)) // 4)


class ScriptedChatModel:
    """Replies from a script, in order; a callable reply sees the request and decides.

    `latency_s` simulates a remote endpoint (awaited, so concurrency behaves as with a
    server). When the script runs out, `default` (if given) answers every further call.
    """

    def __init__(
        self,
        replies: Sequence[Reply] = (),
        name: str = "scripted",
        latency_s: float = 0.0,
        default: Reply | None = None,
    ):
        self.name = name
        self.latency_s = latency_s
        self._replies = iter(replies)
        self._default = default
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count()

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        self.requests.append({"messages": [dict(m) for m in messages], "tools": tools, "sampling": sampling})
        reply = next(self._replies, self._default)
        if reply is None:
            raise AssertionError(f"{self.name}: script exhausted after {len(self.requests) - 1} calls")
        if callable(reply):
            reply = reply(messages, tools)
        message = assistant(reply) if isinstance(reply, str) else dict(reply)
        message.setdefault("role", "assistant")
        message.setdefault("content", "")
        for i, call in enumerate(message.get("tool_calls") or []):
            call.setdefault("id", f"call_{next(self._ids)}_{i}")
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        usage = TokenUsage(prompt_tokens=_approx_tokens(messages), completion_tokens=_approx_tokens(message))
        return ChatResult(message=message, usage=usage, latency_s=self.latency_s, model=self.name)
