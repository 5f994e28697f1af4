"""The collection summary reports turns next to searches once some turn ran several searches."""

from __future__ import annotations

import asyncio

from executor_sft.agents import run_executor
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.rollout.summary import collection_stats
from executor_sft.schema import Episode, Question
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

REPORT = "<answer>x</answer><evidence>Doc 1</evidence>"


class Echo(Retriever):
    def search(self, queries, k):
        return [[Hit(q, q, f"about {q}", 1.0)] for q in queries]


def _run(replies):
    return asyncio.run(run_executor(ScriptedChatModel(replies), Echo(), "sq", role="teacher", max_turns=3))


def _episode(*runs):
    return Episode(
        episode_id="q#0", question=Question(id="q", question="?", golden_answers=["x"]), runs=list(runs)
    )


def test_turns_are_reported_with_parallel_calls_only():
    serial = _run([assistant(tool_calls=[tool_call("search", {"query": "a"}, "c1")]), REPORT])
    both = [tool_call("search", {"query": "a"}, "c1"), tool_call("search", {"query": "b"}, "c2")]
    parallel = _run([assistant(tool_calls=both), REPORT])
    assert (serial.n_searches, serial.n_turns, parallel.n_searches, parallel.n_turns) == (1, 2, 2, 2)
    before = collection_stats([_episode(serial)]).to_dict()["executor_invocations"]["teacher"]
    assert "turns" not in before  # single-call summaries are as they were
    after = collection_stats([_episode(serial), _episode(parallel)]).to_dict()["executor_invocations"][
        "teacher"
    ]
    assert after["searches"] == 3 and after["turns"] == 4 and after["turns_per_invocation"] == 2.0
    assert after["parallel_tool_turns"] == 1


class EchoWithDocuments(Echo):
    def documents(self, doc_ids):
        return [Hit(d, d, f"the whole of {d}", 0.0) for d in doc_ids]


def test_the_access_call_share_is_reported_once_the_access_tool_ran():
    searched = _run([assistant(tool_calls=[tool_call("search", {"query": "a"}, "c1")]), REPORT])
    opened = asyncio.run(
        run_executor(
            ScriptedChatModel(
                [
                    assistant(tool_calls=[tool_call("search", {"query": "a"}, "c1")]),
                    assistant(tool_calls=[tool_call("open_document", {"doc_id": "a"}, "o1")]),
                    REPORT,
                ]
            ),
            EchoWithDocuments(),
            "sq",
            role="teacher",
            max_turns=4,
            tools=("search", "open_document"),
        )
    )
    before = collection_stats([_episode(searched)]).to_dict()["executor_invocations"]["teacher"]
    assert "access_call_share" not in before
    after = collection_stats([_episode(searched), _episode(opened)])
    row = after.to_dict()["executor_invocations"]["teacher"]
    # 1 access call beside 2 searches: a third of the tool calls.
    assert (row["searches"], row["access_calls"], row["access_call_share"]) == (2, 1, 1 / 3)
    from executor_sft.rollout.summary import render_summary

    assert "access calls" in render_summary(after.to_dict())
