"""One recorded model call: the request, the normalised reply, usage, latency, or the error.

Failures are classified once, in `executor_sft.failures`. A failure of what the agent runs on
(an endpoint down or answering 5xx past its retries, a timeout, the retrieval server down, our
own disk full under the request cache: `INFRASTRUCTURE_ERRORS`) raises, so the episode is not
stored and a resume runs it again. A request the endpoint refuses (`ChatRefused`: a 4xx such as
context_length_exceeded) is the episode's own outcome, and any other failure of a call is
recorded too: as its error string, and the caller decides (finish="error" for an executor,
stop_reason="error" for an episode).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from executor_sft.episode_runner import note_model_call
from executor_sft.failures import INFRASTRUCTURE_ERRORS
from executor_sft.llm.base import ChatModel, ChatRefused, SamplingParams
from executor_sft.llm.request_cache import cached_request
from executor_sft.schema import LLMCallRecord, Message, SampledTokens, TokenUsage

logger = logging.getLogger(__name__)

__all__ = ["INFRASTRUCTURE_ERRORS", "CallResult", "call_model", "normalize_assistant", "task_group"]


@contextlib.asynccontextmanager
async def task_group() -> AsyncIterator[asyncio.TaskGroup]:
    """`asyncio.TaskGroup` (when one task raises, the others are cancelled: a failed episode must
    not leave its other calls running against a failing endpoint) that raises that first failure
    itself, not an ExceptionGroup: callers and the episode runner tell an outage from a bug by its type."""
    failure = None
    try:
        async with asyncio.TaskGroup() as group:
            yield group
    except BaseExceptionGroup as failed:
        failure = failed.exceptions[0]
    if failure is not None:
        raise failure  # outside the handler: the failure keeps its own __context__


class CallResult:
    """One call's outcome: the normalised reply (None on failure), its record, the error.

    The record is kept as the constructor arguments of an `LLMCallRecord` and only validated
    when `record` is read: the executor stores every call as a plain dict (`as_dict`), and
    building and dumping a pydantic record per call was the largest per-call CPU cost of
    rollout collection.
    """

    __slots__ = ("message", "error", "_record", "_fields")

    def __init__(
        self,
        message: Message | None,
        record: LLMCallRecord | None = None,
        error: str | None = None,
        *,
        fields: dict[str, Any] | None = None,
    ):
        if record is None and fields is None:
            raise TypeError("CallResult needs a record or its fields")
        self.message = message
        self.error = error
        self._record = record
        self._fields = fields

    @property
    def record(self) -> LLMCallRecord:
        if self._record is None:
            self._record = LLMCallRecord(**self._fields)
        return self._record

    @property
    def usage(self) -> TokenUsage:
        if self._record is None and type(self._fields.get("usage")) is TokenUsage:
            return self._fields["usage"]
        return self.record.usage  # validated: a backend may hand back a dict

    def as_dict(self) -> dict[str, Any]:
        """`record.model_dump(mode="json")`, built directly when the fields are already plain JSON types.

        Nested message values are shared with the live conversation, not deep-copied: agents
        never mutate a message after appending it.
        """
        f = self._fields
        if self._record is not None or not _plain(f):
            return self.record.model_dump(mode="json")
        usage = f.get("usage")
        out = {
            "model": f["model"],
            "messages": f["messages"],
            "tools": f["tools"],
            "response": f.get("response", {"role": "assistant", "content": ""}),
            "usage": usage.model_dump(mode="json") if usage is not None else _ZERO_USAGE.copy(),
            "latency_s": f["latency_s"],
            "error": f.get("error"),
            "t_start": f["t_start"],
        }
        sampled = f.get("sampled_tokens")
        if sampled is not None:
            out["sampled_tokens"] = sampled.model_dump(mode="json")
        return out


_ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0}


def _plain(f: dict[str, Any]) -> bool:
    """Whether validating `f` as an LLMCallRecord would change nothing the JSON dump shows."""
    usage, tools, response = f.get("usage"), f["tools"], f.get("response")
    return (
        type(f["model"]) is str
        and type(f["latency_s"]) is float
        and (usage is None or type(usage) is TokenUsage)
        and (tools is None or type(tools) is list)
        and (response is None or type(response) is dict)
        and (f.get("sampled_tokens") is None or type(f["sampled_tokens"]) is SampledTokens)
    )


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
    """Call `model` once and record it (with `t_start`, wall-clock seconds, for token-order metrics);
    a request the request cache in use answers is replayed from it (`llm.request_cache`).

    Raises what `INFRASTRUCTURE_ERRORS` names; records any other failure."""
    request = [dict(m) for m in messages]
    cached = cached_request(model, request, tools, sampling)
    t_start = time.time()
    start = time.perf_counter()
    try:
        result = await cached.replayed() if cached is not None else None
        if result is None:
            result = await model.chat(request, tools=tools, sampling=sampling)
            if cached is not None:
                cached.keep(result)
    except INFRASTRUCTURE_ERRORS:
        note_model_call()
        raise
    except Exception as exc:  # noqa: BLE001 - a backend's own failure on this request is recorded
        note_model_call()
        if isinstance(exc, ChatRefused):  # the episode's own outcome: one line, no traceback
            logger.warning("%s refused a request: %s", getattr(model, "name", model), exc)
        else:
            logger.exception("%s: unexpected error from the chat backend", getattr(model, "name", model))
        error = f"{type(exc).__name__}: {exc}"
        fields = {
            "model": str(getattr(model, "name", "unknown")),
            "messages": request,
            "tools": tools,
            "latency_s": time.perf_counter() - start,
            "error": error,
            "t_start": t_start,
        }
        return CallResult(message=None, error=error, fields=fields)
    finally:
        if cached is not None:
            cached.release()
    note_model_call(result.usage)
    message = normalize_assistant(result.message, call_prefix)
    fields = {
        "model": result.model or getattr(model, "name", "unknown"),
        "messages": request,
        "tools": tools,
        "response": message,
        "usage": result.usage,
        "latency_s": result.latency_s,
        "t_start": t_start,
    }
    if result.sampled_tokens is not None:
        fields["sampled_tokens"] = result.sampled_tokens
    return CallResult(message=message, fields=fields)
