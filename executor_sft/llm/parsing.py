"""Turn raw assistant text into an OpenAI-shaped message: think blocks and hermes tool calls.

Pure functions, no model or tokenizer: the in-process backends (transformers, vLLM) use them,
and the OpenAI backend falls back on them when an endpoint returns unparsed text.
They never raise on model text; every input ends up as content, tool calls, or malformed
tool calls (see `MALFORMED` below and `tool_call_error`).

Malformed tool-call convention (what the agents check): a `<tool_call>` block whose body is
not a JSON object with a string `name` and an object `arguments` is still returned as a
tool call, so the agent can see the model tried to call a tool and correct it:
- `function.name` is the name if one could be read from the body, else `""`;
- `function.arguments` is the raw body text (stripped) when the body is not JSON, or the
  JSON of the offending `arguments` value when it is not an object.
`tool_call_error(call)` returns why a call is unusable (or None), which is the one test
agents should apply before dispatching.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"

_NAME_RE = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')

Kind = Literal["content", "tool_calls", "malformed"]


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def make_tool_call(name: str, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    """An OpenAI-shaped tool call; `arguments` is a JSON string (or raw text when malformed)."""
    return {
        "id": call_id or new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.IGNORECASE | re.DOTALL)


def strip_think(text: str | None) -> str:
    """The visible text of a reply, with every thought removed, wherever the model put it.

    Drops each `<think>...</think>` block and an unclosed `<think>...` (generation cut off), then
    everything up to the last `</think>` left (a template that prefilled `<think>`); any case.
    Unlike `split_think`, which backends use to keep a leading thought, nothing here is kept.
    """
    if not text:
        return ""
    text = _THINK_BLOCK.sub("", text)
    close = text.lower().rfind(THINK_CLOSE)
    if close >= 0:
        text = text[close + len(THINK_CLOSE) :]
    return text.strip()


def split_think(text: str, think_open: bool = False) -> tuple[str | None, str]:
    """Split `<think>...</think>` reasoning from the answer: returns (reasoning or None, content).

    `think_open=True` means the prompt already opened a think block (templates that prefill
    `<think>`), so text up to the first `</think>` is reasoning. A think block that is never
    closed (generation cut off) makes all the remaining text reasoning and the content empty.
    Only a leading think block counts: `<think>` later in the answer is ordinary content.
    """
    stripped = text.lstrip()
    if not think_open and stripped.startswith(THINK_OPEN):
        think_open, text = True, stripped[len(THINK_OPEN) :]
    elif not think_open and THINK_CLOSE in text and THINK_OPEN not in text:
        # A template prefilled "<think>" that the caller did not tell us about.
        think_open = True
    if not think_open:
        return None, text.strip()
    reasoning, sep, rest = text.partition(THINK_CLOSE)
    if not sep:
        return reasoning.strip(), ""
    return reasoning.strip(), rest.strip()


@dataclass
class ParsedToolCalls:
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0
    """How many of `tool_calls` break the convention above (see `tool_call_error`)."""


def _call_from_body(body: str) -> tuple[dict[str, Any], bool]:
    """One hermes block body -> (tool call, is_malformed); the convention is in the module doc."""
    raw = body.strip()
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        name = obj.get("name") if isinstance(obj.get("name"), str) else ""
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str) and not args.strip():
            args = "{}"
        if isinstance(args, dict):
            arguments, valid = json.dumps(args, ensure_ascii=False), True
        elif isinstance(args, str):
            decoded, error = decode_tool_arguments(args)
            arguments, valid = args, error is None and isinstance(decoded, dict)
        else:  # a list, number or null: keep it visible, as JSON that is not an object
            arguments, valid = json.dumps(args, ensure_ascii=False), False
        return make_tool_call(name, arguments), not (name and valid)
    match = _NAME_RE.search(raw)
    name = ""
    if match:
        try:
            name = json.loads(f'"{match.group(1)}"')
        except ValueError:
            name = match.group(1)
    return make_tool_call(name, raw), True


def parse_tool_calls(text: str) -> ParsedToolCalls:
    """Extract hermes `<tool_call>{"name", "arguments"}</tool_call>` blocks from content.

    The content is the text outside the blocks, stripped. An opening tag without a closing
    tag (generation cut off, or `</tool_call>` used as a stop string) yields a call from the
    rest of the text, valid if that text is a complete call; a stray closing tag stays in
    the content.
    """
    if TOOL_OPEN not in text:
        return ParsedToolCalls(content=text.strip())
    pieces: list[str] = []
    calls: list[dict[str, Any]] = []
    malformed = 0
    pos = 0
    while True:
        start = text.find(TOOL_OPEN, pos)
        if start < 0:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos:start])
        body_start = start + len(TOOL_OPEN)
        end = text.find(TOOL_CLOSE, body_start)
        # A second opening tag before the close means this block was never closed.
        next_open = text.find(TOOL_OPEN, body_start)
        if end < 0 or (0 <= next_open < end):
            stop = next_open if next_open >= 0 else len(text)
            call, bad = _call_from_body(text[body_start:stop])
            calls.append(call)
            malformed += bad
            pos = stop
            continue
        call, bad = _call_from_body(text[body_start:end])
        calls.append(call)
        malformed += bad
        pos = end + len(TOOL_CLOSE)
    return ParsedToolCalls(content="".join(pieces).strip(), tool_calls=calls, malformed=malformed)


@dataclass
class ParsedResponse:
    content: str
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0

    @property
    def kind(self) -> Kind:
        if self.malformed:
            return "malformed"
        return "tool_calls" if self.tool_calls else "content"

    def to_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


def parse_assistant_text(text: str, *, parse_tools: bool = True, think_open: bool = False) -> ParsedResponse:
    """Raw generated text -> content, reasoning (never searched for tools) and tool calls."""
    reasoning, rest = split_think(text, think_open=think_open)
    if not parse_tools:
        return ParsedResponse(content=rest, reasoning_content=reasoning)
    parsed = parse_tool_calls(rest)
    return ParsedResponse(
        content=parsed.content,
        reasoning_content=reasoning,
        tool_calls=parsed.tool_calls,
        malformed=parsed.malformed,
    )


class ParsedToolCall(NamedTuple):
    """A recorded tool call taken apart by `parse_tool_call`; what to do with a bad one is the caller's."""

    name: Any
    """`function.name` as recorded (check it is a string)."""
    raw: Any
    """`function.arguments` as recorded (`missing` when absent)."""
    arguments: Any
    """`raw` decoded when it is a JSON string (to whatever JSON value it holds), else `raw` itself."""
    error: str | None
    """The decoder's message when `raw` is a string that is not JSON, else None."""


def decode_tool_arguments(arguments: Any) -> tuple[Any, str | None]:
    """Tool-call arguments as recorded -> (decoded value, error).

    A JSON string is decoded (to any JSON value; callers check for an object); a string that
    is not JSON comes back as is with the decoder's message; any other value (a dict, None)
    comes back as is with no error.
    """
    if isinstance(arguments, str):
        try:
            return json.loads(arguments), None
        except (ValueError, RecursionError) as exc:
            return arguments, str(exc)
    return arguments, None


def parse_tool_call(call: Any, missing: Any = None) -> ParsedToolCall | None:
    """An OpenAI-shaped (`{"function": {"name", "arguments"}}`) or flat (`{"name", "arguments"}`) call -> its parts.

    None when `call` or its `function` is not an object. `missing` stands for absent arguments.
    """
    if not isinstance(call, dict):
        return None
    fn = call.get("function", call)
    if not isinstance(fn, dict):
        return None
    raw = fn.get("arguments", missing)
    arguments, error = decode_tool_arguments(raw)
    return ParsedToolCall(fn.get("name"), raw, arguments, error)


def tool_call_error(call: dict[str, Any]) -> str | None:
    """Why a tool call cannot be dispatched (None when it can): the agents' one check."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "tool call has no 'function' object"
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return "tool call has no function name"
    args = fn.get("arguments")
    if isinstance(args, dict):
        return None
    if not isinstance(args, str):
        return f"arguments of {name!r} are not a JSON object"
    decoded, error = decode_tool_arguments(args)
    if error is not None:
        return f"arguments of {name!r} are not valid JSON: {args[:200]!r}"
    if not isinstance(decoded, dict):
        return f"arguments of {name!r} are not a JSON object: {args[:200]!r}"
    return None


def prompt_opens_think(prompt: str) -> bool:
    """Whether a rendered prompt ends inside an open `<think>` block (a prefilled think tag)."""
    return prompt.rfind(THINK_OPEN) > prompt.rfind(THINK_CLOSE)
