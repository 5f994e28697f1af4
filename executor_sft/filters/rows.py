"""Executor runs -> TRL conversational SFT rows (docs/filters.md, "SFT rows").

A row is `{"messages", "tools": [SEARCH_TOOL], "stratum", "source_run_id", "question_id",
"dataset"}`. Messages are taken from the run as recorded (system prompt, sub-query, assistant
turns, tool turns, final report) and reduced to the keys chat templates understand:
`role`, `content` (never null), assistant `tool_calls` (`id`, `type`, `function.name`,
`function.arguments`) and optional `reasoning_content`, tool `tool_call_id`. Tool-call
arguments are written consistently as JSON objects (`tool_arguments="dict"`, the form HF chat
templates render with `tojson`/`|items`) or as JSON strings (`"json"`).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal, NotRequired, TypedDict

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.errors import RowError
from executor_sft.llm.parsing import parse_tool_call
from executor_sft.schema import Message, content_text
from executor_sft.tool_protocol import first_problem

ROLES = ("system", "user", "assistant", "tool")


class SFTRow(TypedDict):
    messages: list[Message]
    tools: list[dict[str, Any]]
    stratum: str
    source_run_id: str
    question_id: str
    dataset: str
    sampled_tokens: NotRequired[list[dict[str, Any] | None]]
    """Per assistant message, the ids its model sampled (`executor_sft.sft.fidelity`); absent without any."""


def _content(value: Any, i: int) -> str:
    text_parts = isinstance(value, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in value
    )
    if value is None or isinstance(value, str) or text_parts:
        return content_text(value)
    raise RowError("malformed_messages", f"messages[{i}].content is not text")


def _tool_call(call: Any, i: int, arguments: Literal["dict", "json"]) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise RowError("malformed_messages", f"messages[{i}].tool_calls has a non-object entry")
    parsed = parse_tool_call(call, missing={})
    if parsed is None or not isinstance(parsed.name, str):
        raise RowError("malformed_messages", f"messages[{i}] has a tool call without a function name")
    name = parsed.name
    if parsed.error is not None:
        raise RowError("unparseable_arguments", f"messages[{i}] tool arguments are not JSON")
    args = parsed.arguments
    if not isinstance(args, dict):
        raise RowError("unparseable_arguments", f"messages[{i}] tool arguments are not a JSON object")
    out: dict[str, Any] = {}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    out["type"] = "function"
    out["function"] = {
        "name": name,
        "arguments": args if arguments == "dict" else json.dumps(args, ensure_ascii=False),
    }
    return out


def normalize_messages(
    messages: list[Message], keep_reasoning: bool = True, tool_arguments: Literal["dict", "json"] = "dict"
) -> list[Message]:
    """Reduce recorded messages to chat-template keys and check the executor conversation shape.

    Raises `RowError` when the sequence is not `[system?] user ... assistant(report)`, a role is
    unknown, tool arguments are not a JSON object, or the tool protocol is broken
    (`executor_sft.tool_protocol`: a repeated call id, a call not answered exactly once).
    """
    out: list[Message] = []
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ROLES:
            raise RowError("malformed_messages", f"messages[{i}] has role {role!r}")
        item: Message = {"role": role, "content": _content(msg.get("content"), i)}
        if role == "assistant":
            calls = msg.get("tool_calls") or []
            if calls:
                item["tool_calls"] = [_tool_call(c, i, tool_arguments) for c in calls]
            reasoning = msg.get("reasoning_content")
            if keep_reasoning and isinstance(reasoning, str) and reasoning:
                item["reasoning_content"] = reasoning
        elif role == "tool" and isinstance(msg.get("tool_call_id"), str):
            item["tool_call_id"] = msg["tool_call_id"]
        out.append(item)
    _name_lone_calls(out)
    first = next((m for m in out if m["role"] != "system"), None)
    if first is None or first["role"] != "user":
        raise RowError("malformed_messages", "the conversation does not start with the sub-query (user)")
    last = out[-1]
    if last["role"] != "assistant" or "tool_calls" in last or not last["content"].strip():
        raise RowError("malformed_messages", "the conversation does not end with the assistant's report")
    problem = first_problem(out)
    if problem is not None:
        raise RowError("tool_protocol", problem)
    return out


def _name_lone_calls(messages: list[Message]) -> None:
    """A turn of one call without an id, answered by one tool message without one (another
    writer's record), gets the id `call_<i>` on both: the pairing is not a guess. Any other call
    without an id is left for the protocol check to refuse."""
    for i, m in enumerate(messages[:-1]):
        calls, answer = m.get("tool_calls"), messages[i + 1]
        lone = calls is not None and len(calls) == 1 and "id" not in calls[0]
        if lone and answer["role"] == "tool" and "tool_call_id" not in answer:
            after = messages[i + 2] if i + 2 < len(messages) else None
            if after is None or after["role"] != "tool":
                calls[0] = {"id": f"call_{i}", **calls[0]}
                answer["tool_call_id"] = f"call_{i}"


def to_sft_row(
    messages: list[Message],
    *,
    stratum: str,
    source_run_id: str,
    question_id: str,
    dataset: str,
    keep_reasoning: bool = True,
    tool_arguments: Literal["dict", "json"] = "dict",
    tools: list[dict[str, Any]] | None = None,
    sampled_tokens: list[dict[str, Any] | None] | None = None,
) -> SFTRow:
    """Build one row; raises `RowError` (with its exclusion reason) for an unusable conversation.

    `tools` are the schemas the run was offered (its first call record's); the row trains under
    the same prompt only if it lists the same tools. None: the built-in search tool alone.
    """
    row = SFTRow(
        messages=normalize_messages(messages, keep_reasoning, tool_arguments),
        tools=copy.deepcopy(tools) if tools else [copy.deepcopy(SEARCH_TOOL)],
        stratum=stratum,
        source_run_id=source_run_id,
        question_id=question_id,
        dataset=dataset,
    )
    if sampled_tokens is not None:
        row["sampled_tokens"] = sampled_tokens
    return row
