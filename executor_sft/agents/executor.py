"""The executor: a ReAct search loop in a fresh context that ends in a short report.

One run = system prompt + sub-query, then at most `max_turns` assistant turns, at most
`max_searches` of them searches (the last turn can only report: a search there is refused).
The tool is offered on every turn so that the prompt of each turn is exactly the prefix the
SFT row trains that turn under.
`messages` is exactly the conversation an SFT row needs; every model call is kept in
`calls` for replay and audit. Nothing raises: failures end the run with a `finish` value.
"""

from __future__ import annotations

import dataclasses

from executor_sft.agents.calls import call_model
from executor_sft.agents.parsing import ExecutorAction, classify_executor_reply
from executor_sft.agents.prompting import fill
from executor_sft.agents.settings import ExecutorSettings, Protocol, resolve_max_searches
from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.retrieval.base import Retriever, format_passages
from executor_sft.schema import ExecutorRun, Finish, Message, Report, SearchRecord, Usage, calls_of

NO_PASSAGES = "(no passages found)"
MAX_CORRECTIONS = 1
"""Malformed replies tolerated per run; the next one ends the run with finish="invalid"."""


def _instruction(protocol: str, can_search: bool) -> str:
    report = "reply with your report <answer>...</answer><evidence>...</evidence>"
    if not can_search:
        return f"You cannot search any more: {report}."
    if protocol == "tag":
        return f"Either search with <search>your query</search>, or {report}."
    return f'Either call the search tool once with arguments {{"query": "..."}}, or {report}.'


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
    **overrides: object,
) -> ExecutorRun:
    """Run one executor on one sub-query and return the complete run record.

    `settings` holds the budget, protocol, sampling and prompts; keyword `overrides`
    (`max_turns=`, `top_k=`, `protocol=`, ...) replace its fields for this call. `{top_k}` and
    `{max_searches}` in the system prompt are filled in either way.
    """
    settings = settings or ExecutorSettings()
    if overrides:
        settings = settings.replace(**overrides)
    max_turns, top_k, protocol = settings.max_turns, settings.top_k, settings.protocol
    sampling, prompts, system_prompt = settings.sampling, settings.prompts, settings.system_prompt
    searches_cap = settings.searches
    if protocol == "tag":
        sampling = _tag_sampling(sampling or getattr(model, "sampling", None) or SamplingParams())
    template = system_prompt if system_prompt is not None else prompts.executor(protocol)
    messages: list[Message] = [
        {"role": "system", "content": fill(template, top_k=top_k, max_searches=searches_cap)},
        {"role": "user", "content": sub_query},
    ]
    header = {
        "run_id": run_id or f"{role}/r{round}/q{sub_query_index}",
        "round": round,
        "sub_query_index": sub_query_index,
        "sub_query": sub_query,
        "role": role,
        "model": str(getattr(model, "name", "unknown")),
        "max_turns": max_turns,
        "max_searches": searches_cap,
    }
    _check_header(header, counterfactual_of)
    index_id = getattr(retriever, "index_id", "unnamed")
    searches: list[SearchRecord] = []
    report: Report | None = None
    calls: list[dict] = []
    prompt_tokens = completion_tokens = n_calls = 0
    corrections = 0
    finish: Finish = "turn_budget"
    error: str | None = None

    def can_search(turn: int) -> bool:
        return len(searches) < searches_cap and turn < max_turns - 1

    for turn in range(max_turns):
        searchable = can_search(turn)
        # The tool is offered on every turn, spent budget or not, so each turn's prompt is the prefix
        # the SFT row trains it under; a search past the budget is answered as a correction.
        tools = [SEARCH_TOOL] if protocol == "native" else None
        result = await call_model(model, messages, tools, sampling, call_prefix=f"call_{turn}")
        calls.append(result.as_dict())
        if result.message is None:
            finish, error = "error", result.error
            break
        # Summed locally (as `Usage.add` would), not through pydantic attribute writes per call.
        call_usage = result.usage
        prompt_tokens += call_usage.prompt_tokens
        completion_tokens += call_usage.completion_tokens
        n_calls += calls_of(call_usage)
        action = classify_executor_reply(result.message, protocol, searchable)
        reply = result.message
        if action.kind == "search" and action.content is not None:
            reply = {**reply, "content": action.content}
        messages.append(reply)
        if action.kind == "report":
            finish = "report"
            report = action.report
            break
        has_next = turn + 1 < max_turns
        if action.kind == "search":
            try:
                hits = (await retriever.asearch([action.query], top_k))[0]
            except Exception as exc:  # noqa: BLE001 - a failed search ends the run, recorded
                finish, error = "error", f"retrieval: {type(exc).__name__}: {exc}"
                break
            searches.append(SearchRecord(query=action.query, doc_ids=[h.doc_id for h in hits]))
            passages = format_passages(hits) or NO_PASSAGES
            notice = prompts.search_budget_spent if has_next and not can_search(turn + 1) else None
            messages.extend(_search_result(protocol, reply, passages, notice))
            continue
        corrections += 1
        if corrections > MAX_CORRECTIONS:
            finish = "invalid"
            break
        if has_next:
            text = fill(
                prompts.correction,
                problem=action.problem,
                instruction=_instruction(protocol, can_search(turn + 1)),
            )
            messages.extend(_correction(reply, text))

    # Built once from locals: attribute writes on a pydantic record cost more than the validation.
    # Usage and the extras (calls, n_corrections, error) are stored as computed, unvalidated; the
    # extras' keyword order is their key order in the record.
    usage = Usage.model_construct(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, calls=n_calls
    )
    return ExecutorRun(
        **header,
        messages=messages,
        searches=searches,
        n_searches=len(searches),
        finish=finish,
        report=report,
        counterfactual_of=counterfactual_of,
        usage=usage,
        protocol=protocol,
        top_k=top_k,
        index_id=index_id,
        calls=calls,
        n_corrections=corrections,
        error=error,
    )


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


def _search_result(protocol: str, reply: Message, passages: str, notice: str | None) -> list[Message]:
    if protocol == "tag":
        text = f"<information>{passages}</information>"
        return [{"role": "user", "content": f"{text}\n\n{notice}" if notice else text}]
    out: list[Message] = [{"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": passages}]
    if notice:
        out.append({"role": "user", "content": notice})
    return out


def _correction(reply: Message, text: str) -> list[Message]:
    """One corrective message; tool calls are answered in `tool` messages so the chat stays API-valid."""
    calls = reply.get("tool_calls") or []
    if calls:
        return [{"role": "tool", "tool_call_id": c["id"], "content": text} for c in calls]
    return [{"role": "user", "content": text}]


__all__ = ["ExecutorAction", "ExecutorSettings", "Protocol", "resolve_max_searches", "run_executor"]
