"""Answer metrics (EM, cover-EM, F1, mean@k, weighted means), table answers (item/row F1, success,
Avg/Max/Pass@k), token accounting, LLM judge and CER-C."""

from executor_sft.metrics.aggregate import MeanAtK, mean_at_k, weighted_mean
from executor_sft.metrics.answer import (
    NORMALIZATIONS,
    Normalization,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
)
from executor_sft.metrics.table import (
    AtK,
    ColumnRule,
    Table,
    TableScores,
    at_k,
    judged_table_scores,
    parse_markdown_table,
    render_markdown_table,
    table_scores,
)

__all__ = [
    "AtK",
    "ColumnRule",
    "NORMALIZATIONS",
    "MeanAtK",
    "Normalization",
    "Table",
    "TableScores",
    "at_k",
    "cover_exact_match",
    "exact_match",
    "f1_score",
    "judged_table_scores",
    "mean_at_k",
    "normalize_answer",
    "parse_markdown_table",
    "render_markdown_table",
    "table_scores",
    "weighted_mean",
]
