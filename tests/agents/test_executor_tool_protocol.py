"""Issue 41, point 4, collection's boundary: a reply whose tool calls share an id is not run; it
gets a correction (one per id), as any malformed reply does."""

from __future__ import annotations

from executor_sft.agents import run_executor
from executor_sft.retrieval.base import Hit, Retriever
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

REPORT = "<answer>x</answer><evidence>Doc 1 says x.</evidence>"


class Echo(Retriever):
    def search(self, queries, k):
        return [[Hit(f"d-{q}", q, f"About {q}.", 1.0)] for q in queries]


async def test_calls_sharing_an_id_get_a_correction_not_a_search():
    calls = [tool_call("search", {"query": "a"}, "call_1"), tool_call("search", {"query": "b"}, "call_1")]
    model = ScriptedChatModel([assistant(tool_calls=calls), REPORT])
    result = await run_executor(model, Echo(), "sub-query", max_searches=2)
    assert (result.n_corrections, result.n_searches, result.finish) == (1, 0, "report")
    (answer,) = [m for m in result.messages if m["role"] == "tool"]
    assert answer["tool_call_id"] == "call_1"
    assert "repeats the id 'call_1': every call of a turn needs its own id" in answer["content"]
