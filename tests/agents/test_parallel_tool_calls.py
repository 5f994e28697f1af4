"""Parallel tool calls in one executor turn: concurrency, one tool message per call id, the
per-turn cap, the search budget in queries, `search_many` and the access tool."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from agent_helpers import PASSAGES, ToyRetriever, report
from pydantic import ValidationError

from executor_sft.agents import TOOLS, PipelineConfig, Prompts, run_executor
from executor_sft.llm import OpenAIChatModel
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.retrieval import BM25Retriever, Corpus, Passage, RemoteRetriever
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.retrieval.server import ServerConfig
from executor_sft.retrieval.server import create_app as retrieval_app
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

PARALLEL_PROMPTS = Path(__file__).resolve().parents[2] / "recipes" / "configs" / "prompts_parallel"
SUB_QUERY = "Who founded Velmora, and where was the founder born?"
BUDGET_NOTICE = Prompts().search_budget_spent


def calls(*queries: str, name: str = "search") -> dict:
    return assistant(tool_calls=[tool_call(name, {"query": q}, f"c{i}") for i, q in enumerate(queries, 1)])


class BarrierRetriever(ToyRetriever):
    """Each search waits until `parties` searches are inside at once: run one after the other, the
    first would time out. Records every search's (start, end)."""

    def __init__(self, parties: int = 2):
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=10)
        self.intervals: list[tuple[float, float]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        start = time.monotonic()
        self.barrier.wait()
        hits = super().search(queries, k)
        self.intervals.append((start, time.monotonic()))
        return hits


def test_two_calls_from_a_real_http_server_run_concurrently_and_each_id_is_answered():
    scripted = ScriptedChatModel(
        [calls("Velmora founder", "Ada Krell birthplace"), report("Ada Krell, born in Tarsin")]
    )
    retriever = BarrierRetriever(parties=2)
    with BackgroundServer(create_app(scripted, "scripted")) as server:
        model = OpenAIChatModel("scripted", server.base_url)
        run = asyncio.run(run_executor(model, retriever, SUB_QUERY, max_turns=3))
    assert run.finish == "report" and run.error is None and run.n_corrections == 0
    (a_start, a_end), (b_start, b_end) = retriever.intervals
    assert max(a_start, b_start) < min(a_end, b_end)  # both searches were in flight at once
    assert [m["role"] for m in run.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
    ]
    ids = [c["id"] for c in run.messages[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in run.messages[3:5]] == ids == ["c1", "c2"]
    assert run.messages[3]["content"].startswith("Doc 1 (Title: Velmora)")
    assert run.messages[4]["content"].startswith("Doc 1 (Title: Ada Krell)")
    # A search is one query: both count, in call order, and they spent K-1 = 2 searches.
    assert run.n_searches == 2 and [s.query for s in run.searches] == [
        "Velmora founder",
        "Ada Krell birthplace",
    ]
    assert run.messages[5] == {"role": "user", "content": BUDGET_NOTICE}
    assert run.n_turns == 2 and run.n_tool_turns == 1
    # What the server saw on turn 2 answers both ids (an OpenAI endpoint refuses an unanswered call).
    sent = scripted.requests[1]["messages"]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["c1", "c2"]


async def test_calls_past_the_cap_are_answered_as_not_run_and_count_a_correction():
    model = ScriptedChatModel([calls("Velmora", "Ada Krell", "Tarsin"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=5, parallel_calls=2)
    assert run.finish == "report" and run.n_searches == 2 and run.n_corrections == 1
    tools = [m for m in run.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2", "c3"]
    assert tools[2]["content"].startswith("Your last reply could not be used: call 3 was not run: at most 2")
    assert tools[0]["content"].startswith("Doc 1 (Title: Velmora)")


async def test_calls_past_the_search_budget_are_refused_in_their_own_message():
    model = ScriptedChatModel([calls("Velmora", "Ada Krell", "Tarsin"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=3)  # 2 searches
    assert run.n_searches == 2 and [s.query for s in run.searches] == ["Velmora", "Ada Krell"]
    tools = [m["content"] for m in run.messages if m["role"] == "tool"]
    assert "the search budget is spent" in tools[2] and run.n_corrections == 1
    assert run.messages[-2] == {"role": "user", "content": BUDGET_NOTICE}


async def test_one_bad_call_does_not_stop_the_others():
    bad = assistant(
        tool_calls=[tool_call("search", {"query": "Velmora"}, "c1"), tool_call("browse", {"url": "x"}, "c2")]
    )
    model = ScriptedChatModel([bad, report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY)
    assert run.finish == "report" and run.n_searches == 1 and run.n_corrections == 1
    tools = [m for m in run.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2"]
    assert "unknown tool 'browse'" in tools[1]["content"]


async def test_search_many_counts_each_query_and_stops_at_the_budget():
    many = assistant(tool_calls=[tool_call("search", {"queries": ["Velmora", "Ada Krell", "Tarsin"]}, "m1")])
    model = ScriptedChatModel([many, report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, max_turns=3, tools=("search_many",))
    assert model.requests[0]["tools"] == [TOOLS.get("search_many").schema]
    assert model.requests[0]["tools"][0]["function"]["name"] == "search"
    assert run.finish == "report" and run.n_searches == 2 and run.n_corrections == 0
    text = run.messages[3]["content"]
    assert text.index('Results for "Velmora":\nDoc 1 (Title: Velmora)') < text.index(
        'Results for "Ada Krell":'
    )
    assert 'Results for "Tarsin":\n(not run: the search budget is spent)' in text
    assert run.messages[4] == {"role": "user", "content": BUDGET_NOTICE}


def _corpus() -> Corpus:
    passages = [Passage(doc_id, title, text) for doc_id, title, text in PASSAGES]
    passages.append(Passage("p-velmora-2", "Velmora", "Its old bridge over the Sarn was rebuilt in 1902."))
    return Corpus.from_passages(passages)


async def test_open_document_returns_the_whole_document_and_search_shows_snippets_with_ids():
    retriever = BM25Retriever.build(_corpus())
    model = ScriptedChatModel(
        [
            calls("Velmora founded"),
            assistant(tool_calls=[tool_call("open_document", {"doc_id": "p-velmora"}, "o1")]),
            report("Ada Krell"),
        ]
    )
    run = await run_executor(model, retriever, SUB_QUERY, max_turns=4, tools=("search", "open_document"))
    assert run.finish == "report" and run.n_searches == 1  # reading a document is not a search
    assert "[id: p-velmora]" in run.messages[3]["content"]
    document = run.messages[5]["content"]
    assert document.startswith("(Title: Velmora) [id: p-velmora]\nVelmora is a river town")
    assert document.endswith("\n\nIts old bridge over the Sarn was rebuilt in 1902.")


def test_documents_over_the_retrieval_server():
    local = BM25Retriever.build(_corpus())
    app = retrieval_app(local, ServerConfig(batching=False))
    with BackgroundServer(app) as server:
        remote = RemoteRetriever(server.base_url.removesuffix("/v1"), max_retries=0)
        got = remote.documents(["p-velmora-2", "nope"])
    assert got[0] == local.documents(["p-velmora-2"])[0] and got[1] is None
    assert got[0].text.startswith("Velmora is a river town")


class NoDocuments(Retriever):
    def search(self, queries, k):
        return [[] for _ in queries]


def _open(doc_id: str) -> dict:
    return assistant(tool_calls=[tool_call("open_document", {"doc_id": doc_id}, "o1")])


async def test_open_document_on_a_retriever_without_passages_ends_the_run_with_an_error():
    run = await run_executor(
        ScriptedChatModel([_open("x")]), NoDocuments(), SUB_QUERY, tools=("search", "open_document")
    )
    assert run.finish == "error" and "has no document access" in run.error


def test_open_document_through_the_retrieval_server():
    tools = ("search", "open_document")
    with BackgroundServer(
        retrieval_app(BM25Retriever.build(_corpus()), ServerConfig(batching=False))
    ) as served:
        remote = RemoteRetriever(served.base_url.removesuffix("/v1"), max_retries=0)
        model = ScriptedChatModel([_open("p-velmora-2"), report("Ada Krell")])
        run = asyncio.run(run_executor(model, remote, SUB_QUERY, tools=tools))
    with BackgroundServer(retrieval_app(NoDocuments(), ServerConfig(batching=False))) as bare:
        remote = RemoteRetriever(bare.base_url.removesuffix("/v1"), max_retries=0)
        failed = asyncio.run(run_executor(ScriptedChatModel([_open("x")]), remote, SUB_QUERY, tools=tools))
    assert run.finish == "report" and run.messages[3]["content"].startswith(
        "(Title: Velmora) [id: p-velmora-2]"
    )
    assert failed.finish == "error" and "has no document access (501" in failed.error


def test_config_selects_the_tools_and_the_cap_and_keeps_default_dumps():
    default = PipelineConfig()
    assert "parallel_tool_calls" not in default.model_dump() and "tools" not in default.model_dump()
    wide = PipelineConfig(tools=["search_many", "open_document"], parallel_tool_calls=3)
    settings = wide.executor_settings("teacher")
    assert settings.parallel_calls == 3 and settings.tools == ("search_many", "open_document")
    assert wide.model_dump()["parallel_tool_calls"] == 3
    with pytest.raises(ValidationError, match="tag protocol has only <search>"):
        PipelineConfig(tools=["search_many"], roles={"teacher": {"protocol": "tag"}})
    with pytest.raises(ValidationError, match="two tools are named 'search'"):
        PipelineConfig(tools=["search", "search_many"])


async def test_the_budget1_rerun_of_a_parallel_turn_runs_its_first_query_only():
    """What the budget-1 counterfactual means with parallel calls: one query, not one round."""
    replies = [calls("Velmora founder", "Ada Krell birthplace"), report("Ada Krell")]
    full = await run_executor(ScriptedChatModel(replies), ToyRetriever(), SUB_QUERY, role="teacher")
    budget1 = await run_executor(
        ScriptedChatModel(replies), ToyRetriever(), SUB_QUERY, role="teacher_budget1", max_searches=1
    )
    assert full.n_searches == 2 and full.n_tool_turns == 1
    assert budget1.n_searches == 1 and [s.query for s in budget1.searches] == ["Velmora founder"]
    refused = [m["content"] for m in budget1.messages if m["role"] == "tool"][1]
    assert "the search budget is spent" in refused and budget1.n_corrections == 1


async def test_the_parallel_prompt_fills_the_cap_and_the_budget():
    config = PipelineConfig(parallel_tool_calls=4, max_turns=4, prompts={"directory": str(PARALLEL_PROMPTS)})
    model = ScriptedChatModel([calls("Velmora", "Ada Krell"), report("Ada Krell")])
    run = await run_executor(model, ToyRetriever(), SUB_QUERY, config.executor_settings("teacher"))
    system = run.messages[0]["content"]
    assert "several tool calls at once (up to 4)" in system and "at most 3 search(es)" in system
    assert "{" not in system and run.n_searches == 2
