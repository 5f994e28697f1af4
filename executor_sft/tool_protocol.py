"""The tool protocol of a conversation, checked the same way at every stage boundary.

An assistant turn's tool calls each carry an id of their own (unique in the turn) and arguments
that are a JSON object (a dict, or a string that decodes to one); every call is answered by
exactly one `tool` message naming its id, before the conversation goes on. A conversation that
breaks this trains a model on results nobody asked for, or on calls nobody answered.

The executor checks each reply as it arrives (a violation gets a correction), the filter checks
each row it builds (a violation excludes the run as `tool_protocol`), and SFT checks each row it
reads (a violation is one `file:line` error). `first_problem` is the one check all three call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def call_problems(calls: Any, *, arguments: bool = True) -> str | None:
    """What is wrong with one assistant turn's `tool_calls` (None: nothing); `arguments=False`
    leaves the arguments to the caller (the executor corrects them one call at a time)."""
    if not isinstance(calls, list):
        return "tool_calls is not a list"
    seen: set[str] = set()
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            return f"tool_calls[{j}] is not an object"
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            return f"tool_calls[{j}] has no id"
        if call_id in seen:
            return f"tool_calls[{j}] repeats the id {_short(call_id)}: every call of a turn needs its own id"
        seen.add(call_id)
        if arguments:
            function = call.get("function")
            raw = function.get("arguments") if isinstance(function, dict) else None
            if not _is_object(raw):
                return f"tool_calls[{j}].function.arguments is not a JSON object"
    return None


def first_problem(messages: Sequence[Any], *, open_end: bool = False) -> str | None:
    """The first tool-protocol problem of `messages` as `messages[i]...: what`, or None.

    `open_end`: calls of the last assistant turn may be left unanswered when nothing follows
    them (a recorded run that ended on a failed tool)."""
    pending: dict[str, tuple[int, int]] = {}  # open call id -> (message index, call index)
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return f"messages[{i}] is a tool message without a tool_call_id"
            if call_id not in pending:
                return (
                    f"messages[{i}].tool_call_id {_short(call_id)} answers no open call of the turn before it"
                )
            del pending[call_id]
            continue
        if pending:
            return _unanswered(pending)
        if role == "assistant" and m.get("tool_calls"):
            problem = call_problems(m["tool_calls"])
            if problem is not None:
                return f"messages[{i}].{problem}"
            pending = {call["id"]: (i, j) for j, call in enumerate(m["tool_calls"])}
    if pending and not open_end:
        return _unanswered(pending)
    return None


def _unanswered(pending: dict[str, tuple[int, int]]) -> str:
    call_id, (i, j) = next(iter(pending.items()))
    return f"messages[{i}].tool_calls[{j}] ({_short(call_id)}) has no tool message answering it"


def _is_object(raw: Any) -> bool:
    if isinstance(raw, dict):
        return True
    if not isinstance(raw, str):
        return False
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


def _short(text: str, limit: int = 40) -> str:
    """An id as an error shows it: quoted, cut to `limit` characters (a model may write megabytes)."""
    return repr(text[:limit] + ("..." if len(text) > limit else ""))
