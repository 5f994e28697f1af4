"""Pure parsers for the role protocols (docs/protocols.md).

Each parser takes whatever a model wrote and always returns a classification; none raises.
Reasoning (`<think>` blocks) is removed before parsing, so thoughts never trigger actions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from executor_sft.agents.tools import SEARCH_TOOL_NAME
from executor_sft.llm.parsing import decode_tool_arguments, strip_think
from executor_sft.schema import Message, Report
from executor_sft.tool_protocol import call_problems

_FLAGS = re.IGNORECASE | re.DOTALL
_ANSWER = re.compile(r"<answer>(.*?)</answer>", _FLAGS)
_EVIDENCE = re.compile(r"<evidence>(.*?)(?:</evidence>|\Z)", _FLAGS)
_SUBQUERY = re.compile(r"<subquery>(.*?)</subquery>", _FLAGS)
_STOP = re.compile(r"<\s*stop\s*/?\s*>", re.IGNORECASE)
_SEARCH_OPEN = re.compile(r"<search>", re.IGNORECASE)
_SEARCH_CLOSE = re.compile(r"</search>", re.IGNORECASE)


def _squash(text: str) -> str:
    return " ".join(text.split())


def parse_report(text: str | None) -> Report | None:
    """`<answer>A</answer>` (+ optional `<evidence>E</evidence>`) -> Report; the last answer tag wins.

    An empty answer is no report. An unclosed `<evidence>` runs to the end of the text.
    """
    visible = strip_think(text)
    answers = [_squash(a) for a in _ANSWER.findall(visible)]
    answers = [a for a in answers if a]
    if not answers:
        return None
    evidences = _EVIDENCE.findall(visible)
    evidence = evidences[-1].strip() if evidences else ""
    return Report(answer=answers[-1], evidence=evidence)


def render_report(report: Report | None) -> str:
    """How a report is shown to the backbone and the answerer (rendered from the object, not raw text)."""
    if report is None:
        return "(no report: the sub-agent did not return an answer)"
    text = f"<answer>{report.answer}</answer>"
    if report.evidence:
        text += f"\n<evidence>{report.evidence}</evidence>"
    return text


@dataclass(frozen=True)
class BackboneDecision:
    """What one backbone reply asks for: sub-queries to dispatch (in order), or stop."""

    sub_queries: list[str] = field(default_factory=list)
    dropped: int = 0
    """Sub-queries beyond the per-round cap, plus exact duplicates, that were not dispatched."""
    stop: bool = False
    """True when the reply dispatches nothing (explicit `<stop/>` or no `<subquery>` tag)."""
    explicit_stop: bool = False


def parse_subqueries(text: str | None, max_parallel: int | None = None) -> BackboneDecision:
    """`<subquery>q</subquery>` tags in order; sub-queries win over a `<stop/>` in the same reply.

    Empty tags are ignored, duplicates (after whitespace folding, case-insensitive) kept once,
    and at most `max_parallel` are dispatched; the rest are counted in `dropped`.
    """
    visible = strip_think(text)
    explicit_stop = bool(_STOP.search(visible))
    seen: set[str] = set()
    unique: list[str] = []
    duplicates = 0
    for raw in _SUBQUERY.findall(visible):
        q = _squash(raw)
        if not q:
            continue
        if q.lower() in seen:
            duplicates += 1
            continue
        seen.add(q.lower())
        unique.append(q)
    kept = unique if max_parallel is None else unique[: max(max_parallel, 0)]
    dropped = duplicates + len(unique) - len(kept)
    return BackboneDecision(sub_queries=kept, dropped=dropped, stop=not kept, explicit_stop=explicit_stop)


def parse_final_answer(text: str | None) -> str:
    """The answerer's answer: the last `<answer>` tag, else the whole visible reply stripped."""
    visible = strip_think(text)
    answers = [_squash(a) for a in _ANSWER.findall(visible)]
    answers = [a for a in answers if a]
    if answers:
        return answers[-1]
    return _squash(visible)


ActionKind = Literal["call", "report", "malformed"]


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call of a reply, as read: what to run, or why it cannot run."""

    tool: str | None
    """The name of the tool called (one the executor was offered and may call now; None with a problem)."""
    arguments: Any = None
    """The arguments as the model wrote them (native: a JSON string or object; tag: a dict)."""
    problem: str | None = None
    """Set when the call cannot run (unknown tool, not callable now): its tool message says so."""


@dataclass(frozen=True)
class ExecutorAction:
    """How the runtime reads one executor reply."""

    kind: ActionKind
    calls: tuple[ToolCallRequest, ...] = ()
    """For `call`: the reply's tool calls in order. One call is well-formed (else the reply is
    `malformed`); of several, each may carry its own problem (the others still run)."""
    report: Report | None = None
    problem: str | None = None
    """For `malformed`: a short description that goes into the corrective message."""
    content: str | None = None
    """Tag protocol: the reply cut after the first `</search>` (what a stop sequence would leave, closed)."""


def parse_tool_arguments(arguments: Any, example: str = '{"query": "..."}') -> tuple[dict | None, str | None]:
    """A tool call's arguments (JSON string or dict) -> (arguments object, problem); `example`
    shows the expected shape in the problem."""
    if isinstance(arguments, str) and not arguments.strip():
        arguments = {}
    arguments, error = decode_tool_arguments(arguments)
    if error is not None:
        return None, "the tool-call arguments are not valid JSON"
    if not isinstance(arguments, dict):
        return None, f"the tool-call arguments must be a JSON object like {example}"
    return arguments, None


def _unknown_tool(name: object, tool_names: list[str]) -> str:
    offered = f"the only tool is {tool_names[0]!r}" if len(tool_names) == 1 else f"the tools are {tool_names}"
    return f"unknown tool {str(name)[:50]!r}; {offered}"


def _read_call(call: Any, callable_now: Mapping[str, bool]) -> ToolCallRequest:
    call = call if isinstance(call, dict) else {}
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = function.get("name")
    if not isinstance(name, str) or name not in callable_now:
        return ToolCallRequest(None, problem=_unknown_tool(name, list(callable_now)))
    if not callable_now[name]:
        spent = "the search budget is spent, so you cannot search"
        return ToolCallRequest(
            None, problem=spent if name == SEARCH_TOOL_NAME else f"{name!r} cannot be called now"
        )
    return ToolCallRequest(name, function.get("arguments"))


def _classify_native(message: Message, callable_now: Mapping[str, bool]) -> ExecutorAction:
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        return ExecutorAction("malformed", problem="the tool calls are not a list")
    if calls:
        protocol = call_problems(calls, arguments=False)
        if protocol is not None:
            return ExecutorAction("malformed", problem=f"the reply's {protocol}")
        if not any(callable_now.values()):
            return ExecutorAction("malformed", problem="the search budget is spent, so no tool can be called")
        requests = tuple(_read_call(call, callable_now) for call in calls)
        if len(requests) == 1 and requests[0].problem is not None:
            return ExecutorAction("malformed", problem=requests[0].problem)
        return ExecutorAction("call", calls=requests)
    content = message.get("content")
    report = parse_report(content if isinstance(content, str) else None)
    if report is not None:
        return ExecutorAction("report", report=report)
    return ExecutorAction(
        "malformed", problem="it has neither a search call nor an <answer>...</answer> report"
    )


def _classify_tag(message: Message, search_allowed: bool) -> ExecutorAction:
    raw = message.get("content")
    raw = raw if isinstance(raw, str) else ""
    visible = strip_think(raw)
    search = _SEARCH_OPEN.search(visible)
    answer = _ANSWER.search(visible)
    if search and (answer is None or search.start() < answer.start()):
        if not search_allowed:
            return ExecutorAction("malformed", problem="the search budget is spent, so you cannot search")
        rest = visible[search.end() :]
        close = _SEARCH_CLOSE.search(rest)
        query = _squash(rest[: close.start()] if close else rest.split("<", 1)[0])
        if not query:
            return ExecutorAction("malformed", problem="the <search> tag is empty")
        # Keep everything the model wrote up to the end of this search (a stop sequence would cut there).
        return ExecutorAction(
            "call",
            calls=(ToolCallRequest(SEARCH_TOOL_NAME, {"query": query}),),
            content=_cut_after_search(raw) or raw,
        )
    report = parse_report(raw)
    if report is not None:
        return ExecutorAction("report", report=report)
    return ExecutorAction(
        "malformed", problem="it has neither <search>query</search> nor an <answer>...</answer> report"
    )


def _cut_after_search(raw: str) -> str | None:
    """The raw text up to and including the first `</search>` after the first visible `<search>`."""
    visible_start = 0
    lowered = raw.lower()
    end_think = lowered.rfind("</think>")
    if end_think >= 0:
        visible_start = end_think + len("</think>")
    start = lowered.find("<search>", visible_start)
    if start < 0:
        return None
    close = lowered.find("</search>", start)
    if close >= 0:
        return raw[: close + len("</search>")]
    tail = raw[start + len("<search>") :].split("<", 1)[0]
    return raw[: start + len("<search>")] + tail.rstrip() + "</search>"


def classify_executor_reply(
    message: Message, protocol: str, callable_now: Mapping[str, bool]
) -> ExecutorAction:
    """Read one assistant message under `protocol` ("native" or "tag"); never raises.

    `callable_now` maps each offered tool's name to whether it may be called this turn (the
    search tool: while searches remain; every tool: before the last turn). The tag protocol
    knows only `<search>`."""
    if not isinstance(message, dict):
        return ExecutorAction("malformed", problem="the reply is not a message")
    if protocol == "tag":
        return _classify_tag(message, callable_now.get(SEARCH_TOOL_NAME, False))
    return _classify_native(message, callable_now)
