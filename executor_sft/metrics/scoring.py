"""One episode's answer metrics, for text and table questions alike (pipeline, single agent, no retrieval)."""

from __future__ import annotations

from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.metrics.judge import LLMJudge
from executor_sft.metrics.table import ColumnRule, judged_table_scores, table_scores
from executor_sft.schema import EpisodeMetrics, Question


async def score_answer(question: Question, answer: str | None, judge: LLMJudge | None) -> EpisodeMetrics:
    """EM, F1 and the judge's verdict; a table question is scored by its cells instead.

    Table questions (`question.unique_columns`): em = success, f1 = item F1, and the verdict, when
    a judge is configured, is success itself. The configured judge (the config's `judge` role) grades
    only the cells of the question's `llm_judge` columns (`column_rules`, WideSeek-R1 App. E.1);
    without a judge those columns are compared like exact-match ones.
    """
    if question.unique_columns:
        rules = question.column_rules
        judged = any(ColumnRule.from_dict(r).metric == "llm_judge" for r in (rules or {}).values())
        if judged and judge is not None:
            scores = await judged_table_scores(
                answer,
                question.golden_answers[0],
                question.unique_columns,
                judge,
                rules=rules or {},
                question=question.question,
            )
        else:
            scores = table_scores(answer, question.golden_answers[0], question.unique_columns, rules=rules)
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
