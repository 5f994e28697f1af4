"""Duplicate detection over message sequences.

Two runs are duplicates when they would produce the same training text: the same roles,
contents and tool calls in the same order. The canonical key therefore ignores what differs
between identical runs without changing what is trained -- tool-call ids and `tool_call_id`
links, JSON spacing / key order of tool arguments, and keys other than role, content,
tool_calls and reasoning_content. `reasoning_content` counts only when it is written into the
rows (`include_reasoning`, tied to `FilterConfig.keep_reasoning`): a different thought is a
different training target.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from executor_sft.llm.parsing import parse_tool_call
from executor_sft.schema import Message


def _content(content: Any) -> Any:
    return "" if content is None else content


def canonical_messages(messages: Iterable[Message], include_reasoning: bool = True) -> list[dict[str, Any]]:
    """The parts of each message that define the training text (ids removed, arguments parsed)."""
    out = []
    for msg in messages:
        item: dict[str, Any] = {"role": msg.get("role"), "content": _content(msg.get("content"))}
        if include_reasoning and msg.get("reasoning_content"):
            item["reasoning_content"] = msg["reasoning_content"]
        calls = []
        for call in msg.get("tool_calls") or []:
            parsed = parse_tool_call(call)  # arguments decoded when JSON, else as recorded
            calls.append(
                {"name": parsed.name, "arguments": parsed.arguments}
                if parsed
                else {"name": None, "arguments": None}
            )
        if calls:
            item["tool_calls"] = calls
        out.append(item)
    return out


def canonical_key(messages: Iterable[Message], include_reasoning: bool = True) -> str:
    """A stable hash of `canonical_messages` (sha256 hex)."""
    text = json.dumps(
        canonical_messages(messages, include_reasoning),
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Deduper:
    """Remembers keys seen so far; `add` returns False for a repeat (first in order wins)."""

    def __init__(self, include_reasoning: bool = True):
        self.include_reasoning = include_reasoning
        self._seen: set[str] = set()

    def add(self, messages: Iterable[Message]) -> bool:
        key = canonical_key(messages, self.include_reasoning)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def __len__(self) -> int:
        return len(self._seen)
