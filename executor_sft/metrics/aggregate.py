"""mean@k (a metric averaged over k samples per question, then over questions) and weighted means."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MeanAtK:
    mean: float
    """Mean over questions of the per-question mean over samples."""
    std: float
    """Standard deviation over sample indices of the per-sample-index means (run-to-run noise)."""
    k: int
    n_questions: int


def mean_at_k(scores: Iterable[tuple[str, int, float]]) -> MeanAtK:
    """Aggregate `(question_id, sample_index, score)` triples.

    Questions with fewer than k samples count with the samples they have; `k` is the largest
    number of samples any question has.
    """
    by_question: dict[str, list[float]] = defaultdict(list)
    by_sample: dict[int, list[float]] = defaultdict(list)
    for qid, sample_index, score in scores:
        by_question[qid].append(float(score))
        by_sample[sample_index].append(float(score))
    if not by_question:
        return MeanAtK(mean=0.0, std=0.0, k=0, n_questions=0)
    per_question = [statistics.fmean(v) for v in by_question.values()]
    per_sample = [statistics.fmean(v) for v in by_sample.values()]
    std = statistics.pstdev(per_sample) if len(per_sample) > 1 else 0.0
    k = max(len(v) for v in by_question.values())
    return MeanAtK(mean=statistics.fmean(per_question), std=std, k=k, n_questions=len(by_question))


def weighted_mean(values: Sequence[float | None], weights: Sequence[float]) -> float | None:
    """Mean of `values` weighted by `weights` (e.g. per-dataset scores by question count).

    None values and zero weights are left out; None when nothing is left. The paper's "Avg."
    is this mean with each dataset weighted by its number of instances.
    """
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None and w > 0]
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    return sum(v * w for v, w in pairs) / total
