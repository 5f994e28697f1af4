"""Executor loop: every finish branch, budgets, corrections, tag protocol, records."""

from __future__ import annotations

import pytest
from agent_helpers import PASSAGE_TEXTS, ToyRetriever, report, search_call

from executor_sft.agents import SEARCH_TOOL, TOOLS, Prompts, Tool, run_executor
from executor_sft.llm.base import ChatError, SamplingParams
from executor_sft.retrieval.remote import RetrievalError
from executor_sft.schema import ExecutorRun, LLMCallRecord
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

SUB_QUERY = "Who founded Velmora?"
BUDGET_NOTICE = Prompts().search_budget_spent


def roles(run: ExecutorRun) -> list[str]:
    return [m["role"] for m in run.messages]


async def test_report_on_first_turn():
    model = ScriptedChatModel([report("Ada Krell", "Velmora was founded by Ada Krell.")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, role="teacher")
    assert run.finish == "report"
    assert run.report.answer == "Ada Krell"
    assert run.report.evidence == "Velmora was founded by Ada Krell."
    assert run.n_searches == 0 and run.searches == []
    assert roles(run) == ["system", "user", "assistant"]
    assert run.messages[1] == {"role": "user", "content": SUB_QUERY}
    assert model.requests[0]["tools"] == [SEARCH_TOOL]
    assert len(run.calls) == 1
    assert run.usage.calls == 1


async def test_one_search_then_report():
    retriever = ToyRetriever()
    model = ScriptedChatModel([search_call("founder of Velmora"), report("Ada Krell")])
    run = await run_executor(model, retriever, SUB_QUERY, role="teacher", max_turns=3)
    assert run.finish == "report" and run.n_searches == 1
    assert retriever.queries == ["founder of Velmora"]
    assert run.searches[0].query == "founder of Velmora"
    assert run.searches[0].doc_ids[0] == "p-velmora"
    assert roles(run) == ["system", "user", "assistant", "tool", "assistant"]
    call_id = run.messages[2]["tool_calls"][0]["id"]
    assert run.messages[3]["tool_call_id"] == call_id
    assert run.messages[3]["content"].startswith("Doc 1 (Title: Velmora) Velmora is a river town")
    # Second turn still had a search left (K=3 -> 2 searches), so the tool was still offered.
    assert [r["tools"] for r in model.requests] == [[SEARCH_TOOL], [SEARCH_TOOL]]
    assert BUDGET_NOTICE not in str(model.requests[1]["messages"])


async def test_two_searches_then_budget_notice_and_report():
    model = ScriptedChatModel(
        [search_call("Velmora founder"), search_call("Ada Krell birthplace"), report("Tarsin")]
    )
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=3)
    assert run.finish == "report" and run.n_searches == 2
    assert [s.query for s in run.searches] == ["Velmora founder", "Ada Krell birthplace"]
    assert roles(run) == ["system", "user", "assistant", "tool", "assistant", "tool", "user", "assistant"]
    assert model.requests[2]["tools"] == [SEARCH_TOOL]  # offered on every turn (one prefix with the SFT row)
    assert model.requests[2]["messages"][-1] == {"role": "user", "content": BUDGET_NOTICE}


async def test_search_budget_spent_keeps_the_tool_and_asks_for_report():
    model = ScriptedChatModel([search_call("Velmora"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=3, max_searches=1)
    assert run.finish == "report" and run.n_searches == 1 and run.max_searches == 1
    second = model.requests[1]
    assert second["tools"] == [SEARCH_TOOL]
    assert second["messages"][-1]["role"] == "user"
    assert "used all your searches" in second["messages"][-1]["content"]
    assert "report" in second["messages"][-1]["content"]


async def test_search_after_budget_is_corrected_then_invalid():
    model = ScriptedChatModel([search_call("Velmora"), search_call("again"), search_call("again")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=3, max_searches=1)
    assert run.finish == "invalid"
    assert run.n_searches == 1 and run.n_corrections == 2
    correction = model.requests[2]["messages"][-1]
    assert correction["role"] == "tool" and "search budget is spent" in correction["content"]
    assert "cannot search any more" in correction["content"]


async def test_malformed_json_gets_one_correction_then_invalid():
    bad = assistant(tool_calls=[tool_call("search", '{"query": "Velmora"')])
    model = ScriptedChatModel([bad, bad])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=3)
    assert run.finish == "invalid"
    assert len(model.requests) == 2
    correction = model.requests[1]["messages"][-1]
    assert correction["role"] == "tool"
    assert correction["tool_call_id"] == run.messages[2]["tool_calls"][0]["id"]
    assert "not valid JSON" in correction["content"]
    assert run.report is None and run.n_searches == 0


async def test_malformed_then_recovers():
    model = ScriptedChatModel(
        [assistant(tool_calls=[tool_call("search", "{}")]), search_call("Velmora"), report("Ada Krell")]
    )
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=4)
    assert run.finish == "report" and run.n_searches == 1 and run.n_corrections == 1
    assert 'no "query"' in run.messages[3]["content"]


async def test_unknown_tool_is_corrected():
    model = ScriptedChatModel(
        [assistant(tool_calls=[tool_call("browse", {"url": "x"})]), report("Ada Krell")]
    )
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert run.finish == "report" and run.n_corrections == 1
    assert "unknown tool 'browse'" in model.requests[1]["messages"][-1]["content"]


async def test_no_report_twice_is_invalid():
    model = ScriptedChatModel(["I think it is Ada Krell.", "Still thinking."])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert run.finish == "invalid" and run.report is None
    correction = model.requests[1]["messages"][-1]
    assert correction["role"] == "user" and "<answer>" in correction["content"]


async def test_turn_budget_exhausted_without_report():
    model = ScriptedChatModel([search_call("Velmora"), "no tags here"])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=2)
    assert run.finish == "turn_budget"
    assert run.messages[-1]["role"] == "assistant"  # no correction nobody would read


async def test_last_turn_offers_the_tool_but_refuses_a_search():
    model = ScriptedChatModel(["babble", "more babble"], default=report("x"))
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=2, max_searches=1)
    assert run.finish == "invalid"
    assert model.requests[0]["tools"] == model.requests[1]["tools"] == [SEARCH_TOOL]
    late = ScriptedChatModel([search_call("Velmora"), search_call("again")])
    run = await run_executor(late, ToyRetriever(), SUB_QUERY, max_turns=2)
    assert run.n_searches == 1 and run.finish == "turn_budget"  # the last turn's search was not executed


class FailingModel:
    """Answers from `before`, then raises `exc` on every further call."""

    name = "failing"

    def __init__(self, exc: Exception, before: list | None = None):
        self.exc = exc
        self.before = list(before or [])
        self.inner = ScriptedChatModel(self.before)

    async def chat(self, messages, tools=None, sampling=None):
        if len(self.inner.requests) < len(self.before):
            return await self.inner.chat(messages, tools, sampling)
        raise self.exc


async def test_transport_error_raises_instead_of_ending_the_run():
    """A failure is not a result: an endpoint down past its retries is not recorded as a finished run."""
    model = FailingModel(ChatError("503 after 3 retries"), before=[search_call("Velmora")])
    with pytest.raises(ChatError, match="503 after 3 retries"):
        await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert len(model.inner.requests) == 1


async def test_a_backends_own_error_ends_run_with_error_and_keeps_earlier_turns():
    model = FailingModel(ValueError("prompt longer than the context"), before=[search_call("Velmora")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert run.finish == "error" and run.n_searches == 1
    assert "prompt longer than the context" in run.error
    assert len(run.calls) == 2 and run.calls[1]["error"] and run.usage.calls == 1


@pytest.mark.parametrize(
    "exc", [OSError("index missing"), RetrievalError("http://127.0.0.1:1/retrieve failed after 6 attempts")]
)
async def test_retrieval_outage_raises(exc):
    class Down(ToyRetriever):
        def search(self, queries, k):
            raise exc

    with pytest.raises(type(exc)):
        await run_executor(ScriptedChatModel([search_call("x")]), Down(), SUB_QUERY)


async def test_retriever_bug_is_recorded():
    class Broken(ToyRetriever):
        def search(self, queries, k):
            raise KeyError("title")

    run = await run_executor(ScriptedChatModel([search_call("x")]), Broken(), SUB_QUERY)
    assert run.finish == "error" and "KeyError" in run.error


async def test_reasoning_kept_and_never_parsed():
    reply = assistant(
        content=report("Ada Krell"), reasoning="maybe <search>ignored</search> <answer>wrong</answer>"
    )
    think_in_content = "<think><answer>draft</answer></think>" + report("Ada Krell")
    model = ScriptedChatModel([reply])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert run.report.answer == "Ada Krell"
    assert run.messages[-1]["reasoning_content"].startswith("maybe")
    run2 = await run_executor(ScriptedChatModel([think_in_content]), ToyRetriever(), SUB_QUERY)
    assert run2.report.answer == "Ada Krell"


async def test_usage_is_the_sum_of_call_usage_and_calls_replay():
    model = ScriptedChatModel([search_call("Velmora"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    records = [LLMCallRecord.model_validate(c) for c in run.calls]
    assert run.usage.prompt_tokens == sum(r.usage.prompt_tokens for r in records)
    assert run.usage.completion_tokens == sum(r.usage.completion_tokens for r in records)
    assert run.usage.calls == 2
    # Each call's request is the conversation so far; the responses rebuild the assistant turns.
    assert records[1].messages == run.messages[:4]
    assert records[1].response == run.messages[4]
    assert all(r.t_start > 0 for r in records)


async def test_sampling_passed_through():
    model = ScriptedChatModel([report("x")])
    sampling = SamplingParams(temperature=0.7, enable_thinking=True)
    await run_executor(model, ToyRetriever(), SUB_QUERY, sampling=sampling)
    assert model.requests[0]["sampling"] is sampling


async def test_no_sampling_leaves_model_defaults():
    model = ScriptedChatModel([report("x")])
    await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert model.requests[0]["sampling"] is None  # the backend applies its own defaults
    tagged = ScriptedChatModel([report("x")])
    tagged.sampling = SamplingParams(temperature=0.3, max_tokens=99)
    await run_executor(tagged, ToyRetriever(), SUB_QUERY, protocol="tag")
    sent = tagged.requests[0]["sampling"]
    assert (sent.temperature, sent.max_tokens, sent.stop) == (0.3, 99, ["</search>"])


def test_max_searches_above_turns_minus_one_is_rejected():
    with pytest.raises(ValueError, match="max_searches"):
        import asyncio

        asyncio.run(run_executor(ScriptedChatModel(), ToyRetriever(), SUB_QUERY, max_turns=3, max_searches=3))


async def test_tag_protocol_search_and_report():
    # The stop sequence removes "</search>"; the runtime closes the tag in the record.
    model = ScriptedChatModel(["Let me look. <search>founder of Velmora", report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, protocol="tag", max_turns=2)
    assert run.finish == "report" and run.n_searches == 1
    assert model.requests[0]["tools"] is None
    assert model.requests[0]["sampling"].stop == ["</search>"]
    assert "<search>" in model.requests[0]["messages"][0]["content"]
    assert run.messages[2]["content"] == "Let me look. <search>founder of Velmora</search>"
    info = run.messages[3]
    assert info["role"] == "user" and info["content"].startswith("<information>Doc 1 (Title: Velmora)")
    # K=2: the only search spends the budget, so the notice rides on the information message.
    assert BUDGET_NOTICE in info["content"]


async def test_tag_protocol_drops_invented_information():
    model = ScriptedChatModel(["<search>Velmora</search><information>made up</information>", report("x")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, protocol="tag")
    assert run.messages[2]["content"] == "<search>Velmora</search>"
    assert "made up" not in str(run.messages)


async def test_tag_protocol_malformed_twice():
    model = ScriptedChatModel(["<search>  </search>", "nothing"])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, protocol="tag")
    assert run.finish == "invalid"
    assert "empty" in model.requests[1]["messages"][-1]["content"]


async def test_passages_reach_only_tool_messages():
    model = ScriptedChatModel([search_call("Velmora founded"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    for message in run.messages:
        has_passage = any(text in (message.get("content") or "") for text in PASSAGE_TEXTS)
        assert has_passage == (message["role"] == "tool")


async def test_invalid_run_header_fails_before_any_model_call():
    from pydantic import ValidationError

    model = ScriptedChatModel([report("x")])
    with pytest.raises(ValidationError, match="sub_query"):
        await run_executor(model, ToyRetriever(), None)  # type: ignore[arg-type]
    assert model.requests == []


async def test_run_record_extras_order_and_coerced_header():
    """The record's always-written fields are declared (no extras) in the order they were always
    written, and header values are validated as before."""
    model = ScriptedChatModel([search_call("Velmora"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, round="1", run_id="r")  # type: ignore[arg-type]
    assert run.round == 1 and run.run_id == "r"
    assert not run.__pydantic_extra__
    assert list(type(run).model_fields)[-6:] == [
        "protocol",
        "top_k",
        "index_id",
        "calls",
        "n_corrections",
        "error",
    ]
    assert list(run.model_dump())[-6:] == ["protocol", "top_k", "index_id", "calls", "n_corrections", "error"]
    assert run.usage.model_fields_set == {"prompt_tokens", "completion_tokens", "calls"}


async def _echo(arguments, context):
    if arguments.get("text") == "boom":
        raise RuntimeError("boom")
    return f"echo: {arguments.get('text')} (top_k={context.top_k})"


ECHO = Tool(
    name="echo",
    description="Repeat the text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    run=_echo,
)


@pytest.fixture()
def echo_tool():
    TOOLS.register("echo", ECHO)
    yield ("search", "echo")
    TOOLS.unregister("echo")


def echo_call(text: str) -> dict:
    return assistant(tool_calls=[tool_call("echo", {"text": text})])


async def test_a_registered_tool_runs_by_name_and_is_no_search(echo_tool):
    model = ScriptedChatModel([echo_call("hi"), report("x")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, tools=echo_tool, top_k=2)
    assert run.messages[3]["role"] == "tool" and run.messages[3]["content"] == "echo: hi (top_k=2)"
    assert run.n_searches == 0 and run.finish == "report"
    assert model.requests[0]["tools"] == [SEARCH_TOOL, ECHO.schema]


async def test_search_past_budget_is_refused_while_other_tools_remain(echo_tool):
    model = ScriptedChatModel([search_call("Velmora"), search_call("again"), echo_call("ok"), report("x")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, tools=echo_tool, max_turns=4, max_searches=1)
    assert run.finish == "report" and run.n_searches == 1 and run.n_corrections == 1
    correction = model.requests[2]["messages"][-1]["content"]
    assert "the search budget is spent, so you cannot search" in correction
    assert 'Either call the echo tool once with arguments {"text": "..."}' in correction
    assert model.requests[3]["messages"][-1]["content"] == "echo: ok (top_k=3)"


async def test_unknown_tool_names_every_offered_tool(echo_tool):
    model = ScriptedChatModel([assistant(tool_calls=[tool_call("browse", {})]), report("x")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, tools=echo_tool)
    assert "unknown tool 'browse'; the tools are ['search', 'echo']" in run.messages[3]["content"]


async def test_a_failing_tool_ends_the_run_with_its_name(echo_tool):
    run = await run_executor(
        ScriptedChatModel([echo_call("boom")]), ToyRetriever(), SUB_QUERY, tools=echo_tool
    )
    assert run.finish == "error" and run.error == "tool echo: RuntimeError: boom"


async def test_no_tool_runs_on_the_last_turn(echo_tool):
    model = ScriptedChatModel([echo_call("a"), echo_call("b")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, tools=echo_tool, max_turns=2)
    assert run.finish == "turn_budget" and run.n_corrections == 1
    assert [m["role"] for m in run.messages][-2:] == ["tool", "assistant"]  # the last call went unanswered
