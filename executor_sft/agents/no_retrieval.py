"""The no-retrieval control (App. A, Tab. 6): the answerer alone, from parametric memory.

The model gets the answerer's own prompt and the question with no findings, the same
messages the pipeline's answerer reads when no sub-agent was consulted, so a high score here
means the model already knows the answers. The episode has no rounds and no runs, and is
scored like any other.
"""

from __future__ import annotations

from executor_sft.agents.answerer import run_answerer
from executor_sft.agents.prompting import Prompts
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.metrics.judge import LLMJudge
from executor_sft.metrics.scoring import score_answer
from executor_sft.schema import Episode, Question, Role, Usage
from executor_sft.schema import episode_id as make_episode_id

MODE = "no_retrieval"


async def run_no_retrieval(
    model: ChatModel,
    question: Question,
    *,
    prompts: Prompts | None = None,
    sampling: SamplingParams | None = None,
    sample_index: int = 0,
    judge: LLMJudge | None = None,
) -> Episode:
    """One answer to `question` without any retrieval; never raises on model output."""
    prompts = prompts or Prompts()
    result = await run_answerer(
        model, question.question, [], prompts=prompts, sampling=sampling, answer_format=question.answer_format
    )
    answer = result.answer
    metrics = await score_answer(question, answer, judge)
    failed = result.error is not None
    tokens = result.record.usage
    usage = Usage(prompt_tokens=tokens.prompt_tokens, completion_tokens=tokens.completion_tokens, calls=1)
    return Episode(
        episode_id=make_episode_id(question.id, sample_index),
        sample_index=sample_index,
        question=question,
        config={"mode": MODE, "models": {Role.ANSWERER: getattr(model, "name", "model")}},
        answer=answer,
        metrics=metrics,
        usage={} if failed else {Role.ANSWERER: usage},
        stop_reason="error" if failed else "stopped",
        error=f"answerer: {result.error}" if failed else None,
        answerer=result.record,
    )
