"""Everything the executor reads besides its system prompt file, in one place.

Collection and evaluation (`run_executor`), the SFT rows (the tool schema) and GRPO's search
environment all render from here, so the executor sees the same bytes wherever it runs: the
search tool's description, the passage lines of a search result, the text of an empty
result, the tag protocol's `<information>` wrapper, the budget notice, the correction and its
instruction, and the tool/user messages that carry them. (What a correction names as the
problem is written by the parser that found it, `agents.parsing`.) The system prompts are files
(`prompts/executor_native.md`, `prompts/executor_tag.md`) loaded by `Prompts`, which takes its
notice defaults from this module; a config may replace any of them (docs/agents.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from executor_sft.retrieval.base import Hit
from executor_sft.schema import Message

EXECUTOR_PROMPTS = {"native": "executor_native", "tag": "executor_tag"}
"""The `Prompts` field that holds the executor's system prompt, per protocol."""

SEARCH_DESCRIPTION = (
    "Search the knowledge corpus. Returns the top passages as lines 'Doc i (Title: T) text'. "
    "Use a short, specific query."
)
SEARCH_QUERY_DESCRIPTION = "The search query."

NO_PASSAGES = "(no passages found)"
"""A search result without passages (the runtime's tool message and GRPO's environment alike)."""

SEARCH_BUDGET_SPENT = (
    "You have used all your searches. Do not search again: reply now with your report "
    "<answer>...</answer><evidence>...</evidence>."
)
"""Default of `Prompts.search_budget_spent`: the user message after the search that spent the budget."""

CORRECTION = "Your last reply could not be used: {problem}. {instruction}"
"""Default of `Prompts.correction`: the answer to a malformed reply."""

_REPORT = "reply with your report <answer>...</answer><evidence>...</evidence>"


class CallableTool(Protocol):
    """What the correction's instruction needs to know of a tool (`agents.tools.Tool` has it)."""

    name: str

    @property
    def example(self) -> str: ...


def format_passages(hits: Sequence[Hit]) -> str:
    """Passages as the executor reads them: `Doc i (Title: T) text`, one per line."""
    return "\n".join(f"Doc {i} (Title: {h.title}) {h.text}" for i, h in enumerate(hits, start=1))


def search_result(hits: Sequence[Hit]) -> str:
    """The text a search answers with: its passages, or `NO_PASSAGES`."""
    return format_passages(hits) or NO_PASSAGES


def instruction(protocol: str, callable_tools: Sequence[CallableTool]) -> str:
    """The second half of a correction: what the model may do next turn."""
    if not callable_tools:
        return f"You cannot search any more: {_REPORT}."
    if protocol == "tag":
        return f"Either search with <search>your query</search>, or {_REPORT}."
    if len(callable_tools) == 1:
        tool = callable_tools[0]
        return f"Either call the {tool.name} tool once with arguments {tool.example}, or {_REPORT}."
    names = ", ".join(repr(t.name) for t in callable_tools)
    return f"Either call one of the tools {names} once, or {_REPORT}."


def tool_result_messages(protocol: str, reply: Message, text: str, notice: str | None) -> list[Message]:
    """The messages that answer a tool call: a `tool` message (native) or `<information>` (tag),
    then the notice, if any, as the user's."""
    if protocol == "tag":
        wrapped = f"<information>{text}</information>"
        return [{"role": "user", "content": f"{wrapped}\n\n{notice}" if notice else wrapped}]
    out: list[Message] = [{"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": text}]
    if notice:
        out.append({"role": "user", "content": notice})
    return out


def correction_messages(reply: Message, text: str) -> list[Message]:
    """One corrective message; tool calls are answered in `tool` messages so the chat stays API-valid."""
    calls = reply.get("tool_calls") or []
    if calls:
        return [{"role": "tool", "tool_call_id": c["id"], "content": text} for c in calls]
    return [{"role": "user", "content": text}]
