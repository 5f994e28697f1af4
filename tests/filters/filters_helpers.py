"""Episode builders for the filter tests: real schema records, messages shaped like the runtime's."""

from __future__ import annotations

import itertools
from typing import Any

from executor_sft.schema import Episode, ExecutorRun, Outcome, Question, Report, SearchRecord
from tests.support.doubles import assistant, tool_call

SYSTEM = "You are a search sub-agent. Answer the sub-query from retrieved passages."
_ids = itertools.count()


def conversation(
    sub_query: str,
    queries: list[str],
    answer: str,
    reasoning: str | None = None,
    call_ids: str | None = None,
) -> list[dict[str, Any]]:
    """system, user sub-query, (assistant search call, tool passages) per query, assistant report."""
    prefix = call_ids or f"call{next(_ids)}_"
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": sub_query},
    ]
    for i, q in enumerate(queries):
        msgs.append(assistant("", [tool_call("search", {"query": q}, f"{prefix}{i}")], reasoning=reasoning))
        msgs.append(
            {"role": "tool", "tool_call_id": f"{prefix}{i}", "content": f"Doc 1 (Title: {q}) About {q}."}
        )
    msgs.append(
        assistant(f"<answer>{answer}</answer><evidence>Doc 1 says {answer}.</evidence>", reasoning=reasoning)
    )
    return msgs


def run(
    run_id: str,
    role: str,
    n_searches: int = 1,
    *,
    em: float = 1.0,
    judge: bool | None = True,
    finish: str = "report",
    round: int = 0,
    sub_query_index: int = 0,
    counterfactual_of: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    outcome: bool = True,
) -> ExecutorRun:
    sub_query = f"sub-query r{round} q{sub_query_index}"
    queries = [f"{sub_query} {run_id} search {i}" for i in range(n_searches)]
    answer = f"answer {run_id}"
    return ExecutorRun(
        run_id=run_id,
        round=round,
        sub_query_index=sub_query_index,
        sub_query=sub_query,
        role=role,
        model=f"{role}-model",
        max_turns=3,
        max_searches=1 if role == "teacher_budget1" else 2,
        messages=messages if messages is not None else conversation(sub_query, queries, answer),
        searches=[SearchRecord(query=q, doc_ids=[f"d{i}"]) for i, q in enumerate(queries)],
        n_searches=n_searches,
        finish=finish,
        report=Report(answer=answer) if finish == "report" else None,
        outcome=Outcome(answer=answer, em=em, f1=em, judge=judge) if outcome else None,
        counterfactual_of=counterfactual_of,
    )


def episode(
    episode_id: str, runs: list[ExecutorRun], qid: str | None = None, dataset: str = "hotpotqa"
) -> Episode:
    return Episode(
        episode_id=episode_id,
        question=Question(
            id=qid or f"q-{episode_id}", question="Who?", golden_answers=["x"], dataset=dataset
        ),
        runs=runs,
        answer="x",
    )


def as_dicts(*episodes: Episode) -> list[dict[str, Any]]:
    return [e.to_dict() for e in episodes]
