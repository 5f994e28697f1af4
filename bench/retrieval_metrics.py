"""Single-call retrieval quality: nDCG@k and recall@k of one ranked list against gold passages.

Relevance is graded by gold passage: `gold` is either ids (each gold passage has gain 1) or a
mapping id -> gain (e.g. a hop's own passage 2, the question's other hops 1). A passage not in
`gold` has gain 0. DCG@k = sum over ranks i = 1..k of gain_i / log2(i + 1); nDCG@k divides by
the DCG@k of the best possible ranking (gold passages by gain, best first), so 1.0 means the
top k is as good as the gold allows. A repeated id gains only at its first rank (a later repeat
holds its rank with gain 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Gold = Iterable[str] | Mapping[str, float]


def _gains(gold: Gold) -> dict[str, float]:
    gains = dict(gold) if isinstance(gold, Mapping) else {doc_id: 1.0 for doc_id in gold}
    if not gains:
        raise ValueError("retrieval metrics need at least one gold passage id")
    if any(g < 0 for g in gains.values()):
        raise ValueError(f"gold gains must be >= 0, got {gains}")
    return gains


def dcg_at_k(ranked: Sequence[str], gold: Gold, k: int) -> float:
    gains, seen, total = _gains(gold), set(), 0.0
    for i, doc_id in enumerate(ranked[:k]):
        if doc_id not in seen:
            total += gains.get(doc_id, 0.0) / math.log2(i + 2)
            seen.add(doc_id)
    return total


def ndcg_at_k(ranked: Sequence[str], gold: Gold, k: int) -> float:
    """nDCG@k of `ranked` (best first); 0 when no gold passage has a positive gain."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gains = _gains(gold)
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains.values(), reverse=True)[:k]))
    return dcg_at_k(ranked, gains, k) / ideal if ideal > 0 else 0.0


def recall_at_k(ranked: Sequence[str], gold: Gold, k: int) -> float:
    """Fraction of the gold passages in the top k."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gains = _gains(gold)
    return len(set(ranked[:k]) & set(gains)) / len(gains)
