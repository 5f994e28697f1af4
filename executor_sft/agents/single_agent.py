"""Single-agent baseline ("direct tool"): one model, one context, searches and answers itself.

It reuses the executor loop with the question as the task and its own system prompt, and
returns a normal Episode (one run, role "single_agent", one pseudo-round holding the
question), so the eval stage scores it exactly like the role-factorised pipeline.
"""

from __future__ import annotations

from executor_sft.agents.executor import Protocol, resolve_max_searches, run_executor
from executor_sft.agents.prompting import Prompts
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.metrics.judge import LLMJudge
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import Episode, EpisodeMetrics, Outcome, Question, Role, Round, Usage
from executor_sft.schema import episode_id as make_episode_id

ROLE = Role.SINGLE_AGENT


async def run_single_agent(
    model: ChatModel,
    retriever: Retriever,
    question: Question,
    *,
    sample_index: int = 0,
    max_turns: int = 8,
    max_searches: int | None = None,
    top_k: int = 3,
    protocol: Protocol = "native",
    sampling: SamplingParams | None = None,
    prompts: Prompts | None = None,
    judge: LLMJudge | None = None,
) -> Episode:
    """Answer `question` with one search agent; the tag protocol uses the tag executor prompt."""
    prompts = prompts or Prompts()
    searches = resolve_max_searches(max_turns, max_searches)
    episode_id = make_episode_id(question.id, sample_index)
    run = await run_executor(
        model,
        retriever,
        question.question,
        role=ROLE,
        run_id=f"{episode_id}/r0/q0/{ROLE}",
        max_turns=max_turns,
        max_searches=searches,
        top_k=top_k,
        protocol=protocol,
        sampling=sampling,
        prompts=prompts,
        system_prompt=prompts.get("single_agent") if protocol == "native" else None,
    )
    answer = run.report.answer if run.report else None
    em = exact_match(answer, question.golden_answers)
    f1 = f1_score(answer, question.golden_answers)
    verdict = await judge.judge(question.question, question.golden_answers, answer) if judge else None
    run.outcome = Outcome(answer=answer, em=em, f1=f1, judge=verdict)
    error = run.error
    return Episode(
        episode_id=episode_id,
        sample_index=sample_index,
        question=question,
        config={
            "mode": ROLE,
            "models": {ROLE: run.model},
            "max_turns": max_turns,
            "max_searches": searches,
            "top_k": top_k,
            "protocol": protocol,
            "retriever": getattr(retriever, "index_id", "unnamed"),
            "prompts": prompts.model_dump(mode="json"),
        },
        rounds=[Round(index=0, sub_queries=[question.question], backbone=None)],
        runs=[run],
        answer=answer,
        metrics=EpisodeMetrics(em=em, f1=f1, judge=verdict),
        usage={ROLE: Usage(**run.usage.model_dump())},
        stop_reason="error" if run.finish == "error" else "stopped",
        error=error,
    )
