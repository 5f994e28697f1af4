"""Runs whose turns hold several tool calls, made by the real executor loop, through the filter:
a search is one query, so a one-turn two-query teacher run is a multi-search run."""

from __future__ import annotations

import asyncio

from filters_helpers import episode

from executor_sft.agents import run_executor
from executor_sft.filters import filter_episodes
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.schema import Outcome
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

REPORT = "<answer>x</answer><evidence>Doc 1 says x.</evidence>"


class Echo(Retriever):
    def search(self, queries, k):
        return [[Hit(f"d-{q}", q, f"About {q}.", 1.0)] for q in queries]


def _run(role: str, max_searches: int, *, correct: bool, counterfactual_of: str | None = None):
    calls = [tool_call("search", {"query": "a"}, "c1"), tool_call("search", {"query": "b"}, "c2")]
    run = asyncio.run(
        run_executor(
            ScriptedChatModel([assistant(tool_calls=calls), REPORT]),
            Echo(),
            "sub-query",
            role=role,
            run_id=f"{role}/r0/q0",
            max_searches=max_searches,
            counterfactual_of=counterfactual_of,
        )
    )
    run.outcome = Outcome(answer="x" if correct else "y", em=float(correct), f1=float(correct), judge=correct)
    return run


def test_a_parallel_two_query_teacher_run_is_an_info_gain_row_with_both_results():
    teacher = _run("teacher", 2, correct=True)
    budget1 = _run("teacher_budget1", 1, correct=False, counterfactual_of=teacher.run_id)
    assert (teacher.n_searches, teacher.n_turns, budget1.n_searches) == (2, 2, 1)
    result = filter_episodes([episode("e1", [teacher, budget1])])
    (row,) = result.rows
    assert row["stratum"] == "info_gain_multi_search" and row["source_run_id"] == teacher.run_id
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert [m["tool_call_id"] for m in row["messages"] if m["role"] == "tool"] == ["c1", "c2"]
    assert len(row["messages"][2]["tool_calls"]) == 2


def test_a_correct_budget1_rerun_makes_the_second_query_unneeded():
    teacher = _run("teacher", 2, correct=True)
    budget1 = _run("teacher_budget1", 1, correct=True, counterfactual_of=teacher.run_id)
    result = filter_episodes([episode("e1", [teacher, budget1])])
    assert result.rows == []
    assert result.report["exclusions"]["counterfactual_correct"] == 1
