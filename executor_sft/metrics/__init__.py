"""Answer metrics (EM, cover-EM, F1, mean@k, weighted means), token accounting, LLM judge and CER-C."""

from executor_sft.metrics.aggregate import MeanAtK, mean_at_k, weighted_mean
from executor_sft.metrics.answer import (
    NORMALIZATIONS,
    Normalization,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
)

__all__ = [
    "NORMALIZATIONS",
    "MeanAtK",
    "Normalization",
    "cover_exact_match",
    "exact_match",
    "f1_score",
    "mean_at_k",
    "normalize_answer",
    "weighted_mean",
]
