"""Single-agent baseline ("direct tool"): one model, one context, searches and answers itself.

It reuses the executor loop with the question as the task and its own system prompt, and
returns a normal Episode (one run, role "single_agent", one pseudo-round holding the
question), so the eval stage scores it exactly like the role-factorised pipeline.
"""

from __future__ import annotations

import time

from executor_sft.agents.executor import run_executor
from executor_sft.agents.settings import ExecutorSettings
from executor_sft.llm.base import ChatModel
from executor_sft.metrics.judge import LLMJudge
from executor_sft.metrics.scoring import score_answer
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import Episode, Outcome, Question, Role, Round, Usage
from executor_sft.schema import episode_id as make_episode_id

ROLE = Role.SINGLE_AGENT
DEFAULT_MAX_TURNS = 8


async def run_single_agent(
    model: ChatModel,
    retriever: Retriever,
    question: Question,
    settings: ExecutorSettings | None = None,
    *,
    sample_index: int = 0,
    judge: LLMJudge | None = None,
    **overrides: object,
) -> Episode:
    """Answer `question` with one search agent; the tag protocol uses the tag executor prompt.

    `settings` default to 8 turns; keyword `overrides` (`max_turns=`, `top_k=`, ...) replace fields.
    """
    settings = settings or ExecutorSettings(max_turns=DEFAULT_MAX_TURNS)
    if overrides:
        settings = settings.replace(**overrides)
    if settings.system_prompt is None and settings.protocol == "native":
        settings = settings.replace(system_prompt=settings.prompts.get("single_agent"))
    episode_id = make_episode_id(question.id, sample_index)
    start = time.perf_counter()
    run = await run_executor(
        model, retriever, question.question, settings, role=ROLE, run_id=f"{episode_id}/r0/q0/{ROLE}"
    )
    research_s = time.perf_counter() - start
    answer = run.report.answer if run.report else None
    metrics = await score_answer(question, answer, judge)
    run.outcome = Outcome(answer=answer, em=metrics.em, f1=metrics.f1, judge=metrics.judge)
    error = run.error
    return Episode(
        episode_id=episode_id,
        sample_index=sample_index,
        question=question,
        config={
            "mode": ROLE,
            "models": {ROLE: run.model},
            "max_turns": settings.max_turns,
            "max_searches": settings.searches,
            "top_k": settings.top_k,
            "protocol": settings.protocol,
            "retriever": getattr(retriever, "index_id", "unnamed"),
            "prompts": settings.prompts.model_dump(mode="json"),
        },
        rounds=[Round(index=0, sub_queries=[question.question], backbone=None)],
        runs=[run],
        answer=answer,
        metrics=metrics,
        usage={ROLE: Usage(**run.usage.model_dump())},
        stop_reason="error" if run.finish == "error" else "stopped",
        error=error,
        research_s=research_s,
    )
