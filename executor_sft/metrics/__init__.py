"""Answer metrics (EM, F1, mean@k), and later token accounting, LLM judge and CER-C."""

from executor_sft.metrics.aggregate import MeanAtK, mean_at_k
from executor_sft.metrics.answer import exact_match, f1_score, normalize_answer

__all__ = ["MeanAtK", "exact_match", "f1_score", "mean_at_k", "normalize_answer"]
