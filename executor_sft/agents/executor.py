"""The executor: a ReAct search loop in a fresh context that ends in a short report.

One run = system prompt + sub-query, then at most `max_turns` assistant turns, at most
`max_searches` of them searches (the last turn can only report: a tool call there is refused).
The configured tools (`agents.tools.TOOLS`; default: `search`) are offered on every turn so
that the prompt of each turn is exactly the prefix the SFT row trains that turn under; what the
executor reads besides its system prompt is rendered by `agents.executor_text`.
Several tool calls in one turn run concurrently, at most `parallel_calls` of them, each
answered in its own `tool` message; a search is one query (docs/agents.md, "Parallel tool calls").
`messages` is exactly the conversation an SFT row needs; every model call is kept in
`calls` for replay and audit. A model's failures end the run with a `finish` value; failures of
what it runs on (`agents.calls.INFRASTRUCTURE_ERRORS`: endpoint, retrieval server, disk) raise.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from executor_sft.agents.calls import INFRASTRUCTURE_ERRORS, CallResult, call_model
from executor_sft.agents.dispatch import executor_slot
from executor_sft.agents.executor_text import (
    SNIPPET_CHARS,
    correction_messages,
    instruction,
    parallel_result_messages,
    tool_result_messages,
)
from executor_sft.agents.parsing import (
    ExecutorAction,
    ToolCallRequest,
    classify_executor_reply,
    parse_tool_arguments,
)
from executor_sft.agents.prompting import fill
from executor_sft.agents.settings import ExecutorSettings, Protocol, resolve_max_searches
from executor_sft.agents.tools import (
    OPEN_DOCUMENT_TOOL_NAME,
    SEARCH_TOOL_NAME,
    Tool,
    ToolArgumentError,
    ToolContext,
    resolve_tools,
)
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.llm.routing import routing
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import ExecutorRun, Finish, Message, Report, Usage, calls_of

MAX_CORRECTIONS = 1
"""Malformed replies tolerated per run; the next one ends the run with finish="invalid"."""


def _tag_sampling(sampling: SamplingParams) -> SamplingParams:
    """Tag protocol: stop after `</search>` so the model cannot invent the results."""
    if sampling.stop is None:
        return dataclasses.replace(sampling, stop=["</search>"])
    return sampling


async def run_executor(
    model: ChatModel,
    retriever: Retriever,
    sub_query: str,
    settings: ExecutorSettings | None = None,
    *,
    role: str = "executor",
    run_id: str | None = None,
    round: int = 0,
    sub_query_index: int = 0,
    counterfactual_of: str | None = None,
    max_in_flight: int | None = None,
    **overrides: object,
) -> ExecutorRun:
    """Run one executor on one sub-query and return the complete run record.

    `settings` holds the budget, protocol, sampling, prompts and tools; keyword `overrides`
    (`max_turns=`, `top_k=`, `protocol=`, ...) replace its fields for this call. `{top_k}`,
    `{max_searches}` and `{parallel_tool_calls}` in the system prompt are filled in either way.
    `max_in_flight` caps the executor runs in flight on this loop (`agents.dispatch.executor_slot`).
    """
    async with executor_slot(max_in_flight):
        settings = settings or ExecutorSettings()
        if overrides:
            settings = settings.replace(**overrides)
        header = {
            "run_id": run_id or f"{role}/r{round}/q{sub_query_index}",
            "round": round,
            "sub_query_index": sub_query_index,
            "sub_query": sub_query,
            "role": role,
            "model": str(getattr(model, "name", "unknown")),
            "max_turns": settings.max_turns,
            "max_searches": settings.searches,
        }
        _check_header(header, counterfactual_of)
        run = _ExecutorLoop(model, retriever, settings, sub_query)
        with routing(header["run_id"]):  # every turn of a run on one replica: its prefix stays cached
            for turn in range(settings.max_turns):
                result = await call_model(
                    model, run.messages, run.offered_tools(), run.sampling, call_prefix=f"call_{turn}"
                )
                reply = run.note(result)
                if reply is None or not await run.act(reply, turn):
                    break
        return run.record(header, counterfactual_of, getattr(retriever, "index_id", "unnamed"))


class _ExecutorLoop:
    """One run in progress: the conversation so far and the tallies its record is built from."""

    def __init__(self, model: ChatModel, retriever: Retriever, settings: ExecutorSettings, sub_query: str):
        self.settings = settings
        self.protocol = settings.protocol
        self.max_turns = settings.max_turns
        self.searches_cap = settings.searches
        self.tools = {tool.name: tool for tool in resolve_tools(settings.tools)}
        # Every tool is offered on every turn, spent budget or not, so each turn's prompt is the prefix
        # the SFT row trains it under; a call past the budget is answered as a correction.
        self.offered = [tool.schema for tool in self.tools.values()] if self.protocol == "native" else None
        sampling = settings.sampling
        if self.protocol == "tag":
            sampling = _tag_sampling(sampling or getattr(model, "sampling", None) or SamplingParams())
        self.sampling = sampling
        template = settings.system_prompt
        if template is None:
            template = settings.prompts.executor(self.protocol)
        system = fill(
            template,
            top_k=settings.top_k,
            max_searches=self.searches_cap,
            parallel_tool_calls=settings.parallel_calls,
        )
        self.messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": sub_query},
        ]
        snippets = SNIPPET_CHARS if OPEN_DOCUMENT_TOOL_NAME in self.tools else None
        self.context = ToolContext(
            retriever=retriever, top_k=settings.top_k, searches=[], snippet_chars=snippets
        )
        self.calls: list[dict] = []
        self.prompt_tokens = self.completion_tokens = self.n_calls = 0
        self.corrections = 0
        self.finish: Finish = "turn_budget"
        self.error: str | None = None
        self.report: Report | None = None

    def can_search(self, turn: int) -> bool:
        return len(self.context.searches) < self.searches_cap and turn < self.max_turns - 1

    def callable_now(self, turn: int) -> dict[str, bool]:
        """Which offered tools turn `turn` may call: none on the last turn, search while searches remain."""
        before_last = turn < self.max_turns - 1
        return {
            name: self.can_search(turn) if name == SEARCH_TOOL_NAME else before_last for name in self.tools
        }

    def offered_tools(self) -> list[dict] | None:
        """The tool schemas sent with a request (a copy: the call's record keeps its own)."""
        return list(self.offered) if self.offered is not None else None

    def note(self, result: CallResult) -> Message | None:
        """Keep a model call and its usage; the reply, or None when the call failed (the run ends)."""
        self.calls.append(result.as_dict())
        if result.message is None:
            self.finish, self.error = "error", result.error
            return None
        # Summed locally (as `Usage.add` would), not through pydantic attribute writes per call.
        usage = result.usage
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.n_calls += calls_of(usage)
        return result.message

    async def act(self, reply: Message, turn: int) -> bool:
        """Read the reply of turn `turn` and answer it: the report, the tool calls' results, or a
        correction. False once the run is over."""
        action = classify_executor_reply(reply, self.protocol, self.callable_now(turn))
        if action.content is not None:
            reply = {**reply, "content": action.content}
        self.messages.append(reply)
        if action.kind == "report":
            self.finish, self.report = "report", action.report
            return False
        if action.kind == "call" and len(action.calls) > 1:
            return await self.call_tools(action.calls, reply, turn)
        if action.kind == "call":
            problem = await self.call_tool(action.calls[0], reply, turn)
            if problem is None:
                return self.finish != "error"
        else:
            problem = action.problem
        return self.correct(reply, problem or "", turn)

    async def call_tool(self, request: ToolCallRequest, reply: Message, turn: int) -> str | None:
        """Run the called tool and append its answer; returns the problem of a malformed call.
        A tool that fails ends the run (finish "error"); an infrastructure failure raises."""
        tool = self.tools[request.tool]
        arguments, problem = parse_tool_arguments(request.arguments, tool.example)
        if arguments is None:
            return problem
        searches_before = len(self.context.searches)
        budget = self.searches_cap - searches_before
        text, problem, failure = await _run_tool(
            tool, arguments, dataclasses.replace(self.context, search_budget=budget)
        )
        if problem is not None:
            return problem
        if failure is not None:
            self.finish, self.error = "error", failure
            return None
        searched = len(self.context.searches) > searches_before
        self.messages.extend(
            tool_result_messages(self.protocol, reply, text, self.budget_notice(searched, turn))
        )
        return None

    def budget_notice(self, searched: bool, turn: int) -> str | None:
        """The notice after the tool turn that spent the search budget (None otherwise)."""
        spent = searched and turn + 1 < self.max_turns and not self.can_search(turn + 1)
        return self.settings.prompts.search_budget_spent if spent else None

    async def call_tools(self, requests: tuple[ToolCallRequest, ...], reply: Message, turn: int) -> bool:
        """Several calls of one turn: search budgets are reserved in call order, the calls that may
        run run concurrently, and every call id gets its own `tool` message (its result, or the
        correction naming its problem: calls past `parallel_calls`, unknown tools, bad arguments,
        searches past the budget). A turn with any such call counts one correction."""
        cap = self.settings.parallel_calls
        remaining = self.searches_cap - len(self.context.searches)
        problems: dict[int, str] = {}
        planned: list[tuple[int, Tool, Mapping[str, Any], ToolContext]] = []
        for i, request in enumerate(requests):
            if i >= cap:
                problems[i] = f"call {i + 1} was not run: at most {cap} tool calls per turn"
                continue
            if request.problem is not None:
                problems[i] = request.problem
                continue
            tool = self.tools[request.tool]
            arguments, problem = parse_tool_arguments(request.arguments, tool.example)
            if arguments is None:
                problems[i] = problem or ""
                continue
            cost = tool.search_cost(arguments) if tool.search_cost is not None else 0
            if cost and remaining <= 0:
                problems[i] = "the search budget is spent, so you cannot search"
                continue
            budget = min(cost, remaining)
            remaining -= budget
            context = dataclasses.replace(self.context, searches=[], search_budget=budget)
            planned.append((i, tool, arguments, context))
        outcomes = await asyncio.gather(
            *(_run_tool(tool, arguments, context) for _, tool, arguments, context in planned)
        )
        texts: dict[int, str] = {}
        for (i, _tool, _arguments, context), (text, problem, failure) in zip(planned, outcomes, strict=True):
            if failure is not None:
                self.finish, self.error = "error", failure
                return False
            if problem is not None:
                problems[i] = problem
            else:
                texts[i] = text
                self.context.searches.extend(context.searches)  # call order, whatever order they finished in
        if problems:
            self.corrections += 1
            callable_next = self.callable_now(turn + 1)
            allowed = [tool for name, tool in self.tools.items() if callable_next[name]]
            for i, problem in problems.items():
                texts[i] = fill(
                    self.settings.prompts.correction,
                    problem=problem,
                    instruction=instruction(self.protocol, allowed),
                )
        searched = any(context.searches for _, _, _, context in planned)
        ordered = [texts[i] for i in range(len(requests))]
        self.messages.extend(parallel_result_messages(reply, ordered, self.budget_notice(searched, turn)))
        if self.corrections > MAX_CORRECTIONS:
            self.finish = "invalid"
            return False
        return True

    def correct(self, reply: Message, problem: str, turn: int) -> bool:
        """Answer a malformed reply with the correction; False when it was one too many."""
        self.corrections += 1
        if self.corrections > MAX_CORRECTIONS:
            self.finish = "invalid"
            return False
        if turn + 1 < self.max_turns:
            callable_next = self.callable_now(turn + 1)
            allowed = [tool for name, tool in self.tools.items() if callable_next[name]]
            text = fill(
                self.settings.prompts.correction,
                problem=problem,
                instruction=instruction(self.protocol, allowed),
            )
            self.messages.extend(correction_messages(reply, text))
        return True

    def record(self, header: dict, counterfactual_of: str | None, index_id: str) -> ExecutorRun:
        # Built once from locals: attribute writes on a pydantic record cost more than the validation.
        # Usage and the extras (calls, n_corrections, error) are stored as computed, unvalidated; the
        # extras' keyword order is their key order in the record.
        usage = Usage.model_construct(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens, calls=self.n_calls
        )
        return ExecutorRun(
            **header,
            messages=self.messages,
            searches=self.context.searches,
            n_searches=len(self.context.searches),
            finish=self.finish,
            report=self.report,
            counterfactual_of=counterfactual_of,
            usage=usage,
            protocol=self.protocol,
            top_k=self.settings.top_k,
            index_id=index_id,
            calls=self.calls,
            n_corrections=self.corrections,
            error=self.error,
        )


async def _run_tool(
    tool: Tool, arguments: Mapping[str, Any], context: ToolContext
) -> tuple[str, str | None, str | None]:
    """(text, problem, failure): a `ToolArgumentError` is the call's problem, any other exception
    (but an infrastructure failure, which raises) its failure as `ExecutorRun.error` records it."""
    try:
        text = await tool.run(arguments, context)
        if not isinstance(text, str):
            raise TypeError(f"run returned {type(text).__name__}, not str")
    except ToolArgumentError as exc:
        return "", str(exc), None
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed tool ends the run, recorded
        return "", None, f"{tool.failure_label}: {type(exc).__name__}: {exc}"
    return text, None, None


_HEADER_TYPES = {
    "run_id": str,
    "round": int,
    "sub_query_index": int,
    "sub_query": str,
    "role": str,
    "max_turns": int,
    "max_searches": int,
}


def _check_header(header: dict, counterfactual_of: str | None) -> None:
    """Fail before any model call on arguments the record would reject (plain types need no check)."""
    plain = all(type(header[k]) is t for k, t in _HEADER_TYPES.items())
    if not plain or not (counterfactual_of is None or type(counterfactual_of) is str):
        ExecutorRun(**header, counterfactual_of=counterfactual_of)


__all__ = ["ExecutorAction", "ExecutorSettings", "Protocol", "resolve_max_searches", "run_executor"]
