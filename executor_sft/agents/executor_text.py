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

SEARCH_MANY_DESCRIPTION = (
    "Search the knowledge corpus with several queries at once; they run concurrently. Returns, "
    "per query, the top passages as lines 'Doc i (Title: T) text'. Use short, specific queries."
)
SEARCH_MANY_QUERIES_DESCRIPTION = "The search queries, one per piece of information you need."

OPEN_DOCUMENT_DESCRIPTION = (
    "Read the whole document a search result comes from. Search shows each passage as a short "
    "snippet with its id; pass that id to read the full text."
)
OPEN_DOCUMENT_ID_DESCRIPTION = "The id shown in a search result line, e.g. the X of '[id: X]'."

SNIPPET_CHARS = 200
"""Characters of each passage a search shows when the access tool is offered (ours)."""

NOT_RUN_SPENT = "(not run: the search budget is spent)"

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


def format_snippets(hits: Sequence[Hit], chars: int = SNIPPET_CHARS) -> str:
    """Passages as snippets with their ids (the access tool is on): `Doc i (Title: T) [id: X] text…`."""
    lines = []
    for i, h in enumerate(hits, start=1):
        text = h.text if len(h.text) <= chars else h.text[:chars].rstrip() + "…"
        lines.append(f"Doc {i} (Title: {h.title}) [id: {h.doc_id}] {text}")
    return "\n".join(lines)


def search_result(hits: Sequence[Hit], snippet_chars: int | None = None) -> str:
    """The text a search answers with: its passages (snippets with ids when `snippet_chars`), or
    `NO_PASSAGES`."""
    text = format_passages(hits) if snippet_chars is None else format_snippets(hits, snippet_chars)
    return text or NO_PASSAGES


def multi_search_result(
    queries: Sequence[str],
    results: Sequence[Sequence[Hit]],
    not_run: Sequence[str],
    snippet_chars: int | None,
) -> str:
    """The answer to one `search(queries)` call: a block per query, in the order given."""
    blocks = [
        f'Results for "{q}":\n{search_result(hits, snippet_chars)}'
        for q, hits in zip(queries, results, strict=True)
    ]
    blocks += [f'Results for "{q}":\n{NOT_RUN_SPENT}' for q in not_run]
    return "\n\n".join(blocks)


def document_result(doc: Hit | None, doc_id: str) -> str:
    """The access tool's answer: the whole document, or why there is none."""
    if doc is None:
        return f"(no document with id {doc_id!r}: use an id from a search result)"
    return f"(Title: {doc.title}) [id: {doc.doc_id}]\n{doc.text}"


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


def parallel_result_messages(reply: Message, texts: Sequence[str], notice: str | None) -> list[Message]:
    """The answers to a turn of several tool calls: one `tool` message per call id, in call
    order (OpenAI requires each call answered), then the notice, if any, as the user's."""
    calls = reply["tool_calls"]
    out: list[Message] = [
        {"role": "tool", "tool_call_id": call["id"], "content": text}
        for call, text in zip(calls, texts, strict=True)
    ]
    if notice:
        out.append({"role": "user", "content": notice})
    return out


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
    ids = list(dict.fromkeys(c["id"] for c in reply.get("tool_calls") or []))  # a repeated id: answered once
    if ids:
        return [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id in ids]
    return [{"role": "user", "content": text}]
