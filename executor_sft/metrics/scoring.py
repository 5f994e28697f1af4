"""One episode's answer metrics, for text and table questions alike (pipeline, single agent, no retrieval)."""

from __future__ import annotations

from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.metrics.judge import LLMJudge
from executor_sft.metrics.table import table_scores
from executor_sft.schema import EpisodeMetrics, Question


async def score_answer(question: Question, answer: str | None, judge: LLMJudge | None) -> EpisodeMetrics:
    """EM, F1 and the judge's verdict; a table question is scored by its cells instead.

    Table questions (`question.unique_columns`): em = success, f1 = item F1, and the verdict, when
    a judge is configured, is success itself, compared cell by cell without a model call (a model
    judging a whole table would be a coarser, costlier copy of the same comparison).
    """
    if question.unique_columns:
        scores = table_scores(answer, question.golden_answers[0], question.unique_columns)
        return EpisodeMetrics(
            em=scores.success,
            f1=scores.item_f1,
            judge=scores.success == 1.0 if judge is not None else None,
            item_f1=scores.item_f1,
            row_f1=scores.row_f1,
            success=scores.success,
        )
    verdict = await judge.judge(question.question, question.golden_answers, answer) if judge else None
    return EpisodeMetrics(
        em=exact_match(answer, question.golden_answers),
        f1=f1_score(answer, question.golden_answers),
        judge=verdict,
    )
