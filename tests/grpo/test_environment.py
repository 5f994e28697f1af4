"""The per-rollout search environment, over real BM25 on a slice of the minibench corpus."""

from __future__ import annotations

import inspect
import itertools
import json

import pytest

from executor_sft.agents import run_executor
from executor_sft.agents.executor_text import NO_PASSAGES, format_passages
from executor_sft.agents.prompting import Prompts
from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.grpo.environment import SearchEnvironment, SearchEnvironmentFactory
from executor_sft.retrieval import BM25Retriever, Corpus, iter_corpus
from tests.support.doubles import ScriptedChatModel, assistant, tool_call


class CountingRetriever:
    """Wraps a real retriever and counts calls (to check the budget stops retrieval)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def search(self, queries, k):
        self.calls.append((list(queries), k))
        return self.inner.search(queries, k)


@pytest.fixture(scope="module")
def small_bm25(minibench_corpus_path):
    passages = list(itertools.islice(iter_corpus(minibench_corpus_path), 500))
    return BM25Retriever.build(Corpus.from_passages(passages)), passages


@pytest.mark.slow  # imports transformers
def test_tool_schema_is_the_runtime_search_tool():
    from transformers.utils import get_json_schema

    env = SearchEnvironment(retriever=None, top_k=3)
    # TRL renders each public method with transformers' get_json_schema: it must be SEARCH_TOOL.
    assert get_json_schema(env.search) == SEARCH_TOOL
    # ... and TRL exposes every public function of the class except reset/get_reward as a tool.
    tools = [n for n, _ in inspect.getmembers(SearchEnvironment, inspect.isfunction) if not n.startswith("_")]
    assert sorted(tools) == ["reset", "search"]


def test_search_returns_formatted_top_k(small_bm25):
    bm25, passages = small_bm25
    retriever = CountingRetriever(bm25)
    env = SearchEnvironment(retriever, top_k=2, max_searches=2)
    env.reset(prompt=[], reference=["x"])
    title = passages[7].title
    out = env.search(f"  {title}\n")
    assert out == format_passages(bm25.search([title], 2)[0])
    assert out.startswith("Doc 1 (Title: ") and "\nDoc 2 (Title: " in out
    assert retriever.calls == [([title], 2)]  # whitespace folded
    assert env.n_searches == 1 and env.searches[0].query == title and len(env.searches[0].doc_ids) == 2


def test_budget_then_notice_and_reset(small_bm25):
    bm25, passages = small_bm25
    retriever = CountingRetriever(bm25)
    env = SearchEnvironment(retriever, top_k=1, max_searches=1)
    env.reset()
    assert env.search(passages[0].title).startswith("Doc 1")
    notice = env.search(passages[1].title)
    assert notice == Prompts().search_budget_spent
    assert len(retriever.calls) == 1 and env.n_searches == 1  # the over-budget call did not retrieve
    env.reset()
    assert env.n_searches == 0 and env.search(passages[1].title).startswith("Doc 1")


def test_empty_or_unmatched_query(small_bm25):
    bm25, _ = small_bm25
    env = SearchEnvironment(bm25, top_k=3, max_searches=3)
    assert env.search("   ") == NO_PASSAGES
    assert env.search("zzqqxxnotaword") == NO_PASSAGES
    assert env.n_searches == 2  # both were tool calls: both count against the budget


@pytest.mark.parametrize("matched", [True, False], ids=["passages", "empty"])
async def test_search_answers_as_the_executor_runtime_tool_message(small_bm25, matched):
    bm25, passages = small_bm25
    query = passages[7].title if matched else "zzqqxxnotaword"
    model = ScriptedChatModel(
        [assistant(tool_calls=[tool_call("search", {"query": query})]), "<answer>x</answer>"]
    )
    run = await run_executor(model, bm25, "a sub-query", top_k=2, max_turns=3)
    tool_message = run.messages[3]
    assert tool_message["role"] == "tool" and run.searches[0].query == query
    env = SearchEnvironment(bm25, top_k=2, max_searches=2)
    env.reset()
    assert env.search(query) == tool_message["content"]
    assert (tool_message["content"] == NO_PASSAGES) is not matched


async def test_last_turn_differs_from_the_runtime_as_docs_grpo_lists(small_bm25):
    """Pins the one listed difference (docs/grpo.md): after the search that spends the budget the
    runtime adds the budget notice as a user message before the last turn; GRPO's environment
    cannot add a message, so that search answers with passages only and the notice comes only
    as the answer to a further call. Both take the notice's text from `Prompts`."""
    bm25, passages = small_bm25
    queries = [passages[3].title, passages[4].title]
    model = ScriptedChatModel(
        [
            assistant(tool_calls=[tool_call("search", {"query": q}, call_id=f"c{i}")])
            for i, q in enumerate(queries)
        ]
        + ["<answer>x</answer><evidence>Doc 1</evidence>"]
    )
    run = await run_executor(model, bm25, "a sub-query", top_k=2, max_turns=3)
    notice = Prompts().search_budget_spent
    roles = [m["role"] for m in run.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "user", "assistant"]
    assert run.messages[6]["content"] == notice  # what the runtime's last turn reads
    env = SearchEnvironment(bm25, top_k=2, max_searches=2)
    env.reset()
    assert [env.search(q) for q in queries] == [run.messages[3]["content"], run.messages[5]["content"]]
    assert notice not in run.messages[5]["content"]  # no notice with the spending search in GRPO
    assert env.search(queries[0]) == notice  # only a call past the budget reads it


def test_factory_makes_isolated_instances(small_bm25):
    bm25, passages = small_bm25
    factory = SearchEnvironmentFactory(bm25, top_k=1, max_searches=1, budget_notice="stop now")
    a, b = factory(), factory()
    assert a is not b and factory.created == [a, b]
    a.search(passages[0].title)
    assert a.search(passages[0].title) == "stop now"
    assert b.search(passages[0].title).startswith("Doc 1")  # b's budget is its own


def test_rejects_bad_budget():
    with pytest.raises(ValueError, match="top_k"):
        SearchEnvironment(None, top_k=0)
    with pytest.raises(ValueError, match="max_searches"):
        SearchEnvironment(None, max_searches=-1)


async def test_a_turn_of_parallel_calls_reads_as_in_the_runtime(small_bm25):
    """TRL runs every call of a turn (each `env.search(**arguments)`, in call order); the runtime
    runs them too, concurrently, and both count one search per query: the results agree."""
    bm25, passages = small_bm25
    queries = [passages[3].title, passages[4].title]
    calls = [tool_call("search", {"query": q}, call_id=f"c{i}") for i, q in enumerate(queries)]
    model = ScriptedChatModel([assistant(tool_calls=calls), "<answer>x</answer><evidence>Doc 1</evidence>"])
    run = await run_executor(model, bm25, "a sub-query", top_k=2, max_turns=3)
    assert run.n_searches == 2 and run.n_corrections == 0
    env = SearchEnvironment(bm25, top_k=2, max_searches=2)
    env.reset()
    answered = [env.search(**json.loads(call["function"]["arguments"])) for call in calls]
    assert answered == [m["content"] for m in run.messages if m["role"] == "tool"]
    assert env.n_searches == run.n_searches == 2


@pytest.mark.slow  # imports transformers
def test_alternative_tools_have_the_runtime_schemas():
    from transformers.utils import get_json_schema

    from executor_sft.agents.tools import OPEN_DOCUMENT, SEARCH_MANY

    env = SearchEnvironmentFactory(None, tools=("search_many", "open_document"))()
    assert get_json_schema(env.search) == SEARCH_MANY.schema
    assert get_json_schema(env.open_document) == OPEN_DOCUMENT.schema
    assert not hasattr(SearchEnvironmentFactory(None)(), "open_document")  # the default offers search alone


async def test_search_many_and_open_document_read_as_in_the_runtime(small_bm25):
    bm25, passages = small_bm25
    queries = [passages[3].title, passages[4].title, passages[5].title]
    many = assistant(tool_calls=[tool_call("search", {"queries": queries}, "m1")])
    opened = assistant(tool_calls=[tool_call("open_document", {"doc_id": passages[3].id}, "o1")])
    model = ScriptedChatModel([many, opened, "<answer>x</answer><evidence>Doc 1</evidence>"])
    tools = ("search_many", "open_document")
    run = await run_executor(model, bm25, "a sub-query", top_k=2, max_turns=3, tools=tools)
    assert run.n_searches == 2  # the third query is past the budget of K-1 = 2
    env = SearchEnvironmentFactory(bm25, top_k=2, max_searches=2, tools=tools)()
    env.reset()
    assert env.search(queries) == run.messages[3]["content"]
    assert (
        "[id: " in run.messages[3]["content"]
        and "(not run: the search budget is spent)" in run.messages[3]["content"]
    )
    assert env.open_document(passages[3].id) == run.messages[6]["content"]  # after the budget notice
    assert env.n_searches == 2


def test_tools_without_an_environment_are_a_config_error():
    from executor_sft.errors import ConfigError

    for tools in (("open_document",), ("search", "search_many")):
        with pytest.raises(ConfigError):
            SearchEnvironmentFactory(None, tools=tools)
