"""Every search records its wall time and the retriever that answered; every episode its research time."""

from __future__ import annotations

import asyncio
import time

from executor_sft.agents import run_episode, run_single_agent
from executor_sft.agents.config import PipelineConfig
from executor_sft.retrieval import Hit, Retriever
from executor_sft.schema import Episode, Question, SearchRecord
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

DELAY_S = 0.05


class Slow(Retriever):
    """A retriever that takes DELAY_S per call (a real sleep: the tool measures wall time)."""

    index_id = "slow-index"

    def search(self, queries, k):
        time.sleep(DELAY_S)
        return [[Hit("d1", "T", "text", 1.0)] for _ in queries]


def _executor(messages, tools):
    if not any(m["role"] == "tool" for m in messages):
        return assistant(tool_calls=[tool_call("search", {"query": "q"})])
    return "<answer>a</answer><evidence>text</evidence>"


def test_searches_and_the_research_phase_are_timed():
    models = {
        "backbone": ScriptedChatModel(["<subquery>one</subquery><subquery>two</subquery>", "<stop/>"]),
        "executor": ScriptedChatModel(name="ex", default=_executor),
        "answerer": ScriptedChatModel(["<answer>a</answer>"], latency_s=0.2),
    }
    config = PipelineConfig(executor_roles=["executor"], driver="executor", max_rounds=2)
    q = Question(id="q", question="?", golden_answers=["a"])
    episode = asyncio.run(run_episode(q, models, Slow(), config))
    searches = [s for r in episode.runs for s in r.searches]
    assert len(searches) == 2 and all(s.retriever == "slow-index" for s in searches)
    assert all(DELAY_S <= s.latency_s < 10 * DELAY_S + 1 for s in searches)
    # Research = rounds and executors (the two runs of a round in parallel), not the 0.2 s answerer.
    assert DELAY_S <= episode.research_s < 0.2
    single = asyncio.run(run_single_agent(ScriptedChatModel(name="sa", default=_executor), Slow(), q))
    assert single.research_s >= single.runs[0].searches[0].latency_s >= DELAY_S


def test_untimed_records_are_written_as_before():
    assert SearchRecord(query="q", doc_ids=["d"]).to_json() == '{"query":"q","doc_ids":["d"]}'
    episode = Episode(episode_id="e", question=Question(id="q", question="?", golden_answers=[]))
    assert (
        "research_s" not in episode.to_json()
        and "research_s" in episode.model_copy(update={"research_s": 1.5}).to_json()
    )
