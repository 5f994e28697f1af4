"""One recorded model call: the request, the normalised reply, usage, latency, or the error.

Agents never raise on a failed call: the error string is recorded and the caller decides
(finish="error" for an executor, stop_reason="error" for an episode).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from executor_sft.llm.base import ChatError, ChatModel, SamplingParams
from executor_sft.schema import LLMCallRecord, Message, TokenUsage

logger = logging.getLogger(__name__)


@dataclass
class CallResult:
    message: Message | None
    """The normalised assistant message, or None when the call failed."""
    record: LLMCallRecord
    error: str | None = None

    @property
    def usage(self) -> TokenUsage:
        return self.record.usage


def normalize_assistant(message: Any, call_prefix: str = "call") -> Message:
    """An OpenAI-style assistant message with string content, optional reasoning and tool calls.

    Tool-call ids are filled in when a backend leaves them out, and dict arguments are
    serialised to a JSON string, so the message can be sent back to any endpoint and
    written into an SFT row unchanged.
    """
    message = message if isinstance(message, dict) else {"content": str(message)}
    content = message.get("content")
    out: Message = {"role": "assistant", "content": content if isinstance(content, str) else ""}
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        out["reasoning_content"] = reasoning
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        fixed = []
        for i, call in enumerate(calls):
            call = (
                dict(call) if isinstance(call, dict) else {"function": {"name": str(call), "arguments": ""}}
            )
            function = call.get("function")
            function = (
                dict(function)
                if isinstance(function, dict)
                else {"name": call.get("name"), "arguments": call.get("arguments")}
            )
            args = function.get("arguments")
            if not isinstance(args, str):
                try:
                    function["arguments"] = json.dumps(args if args is not None else {}, ensure_ascii=False)
                except (TypeError, ValueError):
                    function["arguments"] = str(args)
            fixed.append(
                {
                    "id": str(call.get("id") or f"{call_prefix}_{i}"),
                    "type": "function",
                    "function": {"name": function.get("name"), "arguments": function["arguments"]},
                }
            )
        out["tool_calls"] = fixed
    return out


async def call_model(
    model: ChatModel,
    messages: list[Message],
    tools: list[dict[str, Any]] | None = None,
    sampling: SamplingParams | None = None,
    call_prefix: str = "call",
) -> CallResult:
    """Call `model` once and record it (with `t_start`, wall-clock seconds, for token-order metrics)."""
    request = [dict(m) for m in messages]
    t_start = time.time()
    start = time.perf_counter()
    try:
        result = await model.chat(request, tools=tools, sampling=sampling)
    except Exception as exc:  # noqa: BLE001 - agents record failures instead of raising
        if not isinstance(exc, ChatError):
            logger.exception("%s: unexpected error from the chat backend", getattr(model, "name", model))
        error = f"{type(exc).__name__}: {exc}"
        record = LLMCallRecord(
            model=str(getattr(model, "name", "unknown")),
            messages=request,
            tools=tools,
            latency_s=time.perf_counter() - start,
            error=error,
            t_start=t_start,
        )
        return CallResult(message=None, record=record, error=error)
    message = normalize_assistant(result.message, call_prefix)
    record = LLMCallRecord(
        model=result.model or getattr(model, "name", "unknown"),
        messages=request,
        tools=tools,
        response=message,
        usage=result.usage,
        latency_s=result.latency_s,
        t_start=t_start,
    )
    return CallResult(message=message, record=record)
