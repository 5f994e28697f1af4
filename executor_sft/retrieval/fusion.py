"""Hybrid retrieval: fuse a lexical and a dense retriever (or any two or more) per query.

- `weighted` (default): a convex combination, fused score = sum of weight * normalised score.
  Normalisations (`normalization=`):
  - `theoretical` (default): theoretical min-max (Bruch, Gai & Ingber 2023, "An Analysis of Fusion
    Functions for Hybrid Retrieval", TM2C2): (s - floor) / (query max - floor), where floor is the
    scorer's lowest possible score: 0 for BM25, -1 for the dense retriever (inner product of
    L2-normalised embeddings = cosine). The floor is a property of the scorer, not of the query, so
    a flat list stays flat: min-max over the list would map a dense list of 0.62..0.58 (nothing stands
    out) to 1..0, the same spread as a BM25 list of 30..3 where the top hit is far ahead. Retrievers
    of unknown range fall back to the list minimum.
  - `minmax`: min-max over the retriever's own top-`depth` list.
  - `zscore`: (s - mean) / std over the retriever's own top-`depth` list.
  A candidate one retriever did not return is given the lowest score that retriever returned (its
  best possible value: it ranked below all of them); if the list is shorter than `depth` the
  retriever returned every candidate it scores, so the candidate gets the floor (0 after
  normalisation). Imputing the floor for a full list instead would treat "just below the cut-off"
  as "unrelated" and turn the fusion into an intersection.
- `rrf`: reciprocal rank fusion, score = sum of weight / (rrf_k + rank), rank from 1.
Each retriever is asked for `depth` candidates (default max(k, 20)) so fusion can promote
documents that neither ranks at the very top.

Measured on minibench (3,000-passage sub-corpus, 0.6 dense / 0.4 BM25, depth 20; see
docs/retrieval.md): theoretical is the only normalisation whose R@5 is at least the best single
retriever's on both dev questions and MuSiQue sub-questions.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from executor_sft.retrieval.base import Hit, Retriever

DEFAULT_WEIGHTS = (0.6, 0.4)  # dense, bm25
METHODS = ("weighted", "rrf")
NORMALIZATIONS = ("theoretical", "minmax", "zscore")


def score_floor(retriever: Retriever) -> float | None:
    """The lowest score a retriever can give (None: unknown; fusion then uses the list minimum)."""
    from executor_sft.retrieval.bm25 import BM25Retriever, RankBM25Retriever
    from executor_sft.retrieval.dense import DenseRetriever

    floor = getattr(retriever, "score_floor", None)
    if isinstance(floor, int | float):
        return float(floor)
    if isinstance(retriever, DenseRetriever):
        return -1.0  # inner product of unit vectors
    if isinstance(retriever, BM25Retriever | RankBM25Retriever):
        return 0.0
    return None


def normalise(
    hits: list[Hit], normalization: str = "theoretical", floor: float | None = None, depth: int | None = None
) -> tuple[dict[str, float], float]:
    """One retriever's normalised scores by doc id, and the value for a candidate it did not return."""
    if not hits:
        return {}, 0.0
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    complete = depth is not None and len(hits) < depth  # the list holds every candidate it scores
    if normalization == "zscore":
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
        norm = {h.doc_id: (h.score - mean) / std if std > 0 else 0.0 for h in hits}
        if complete and floor is not None and std > 0:
            return norm, (floor - mean) / std
        return norm, min(norm.values())
    if normalization == "minmax" or floor is None:
        base = lo
    elif normalization == "theoretical":
        base = floor
    else:
        raise ValueError(f"normalization {normalization!r}: expected one of {NORMALIZATIONS}")
    span = hi - base
    norm = {h.doc_id: (h.score - base) / span if span > 0 else 1.0 for h in hits}
    return norm, 0.0 if complete else min(norm.values())


def fuse(
    results: Sequence[list[Hit]],
    weights: Sequence[float],
    k: int,
    method: str = "weighted",
    rrf_k: int = 60,
    normalization: str = "theoretical",
    floors: Sequence[float | None] | None = None,
    depth: int | None = None,
) -> list[Hit]:
    """Fuse one query's hit lists (one list per retriever) into the top k.

    `floors`: each retriever's lowest possible score (theoretical normalisation); `depth`: how many
    hits each retriever was asked for (a shorter list holds every candidate it scores).
    """
    if method not in METHODS:
        raise ValueError(f"fusion method {method!r}: expected one of {METHODS}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization {normalization!r}: expected one of {NORMALIZATIONS}")
    floors = list(floors) if floors is not None else [None] * len(results)
    first: dict[str, Hit] = {}
    for hits in results:
        for h in hits:
            first.setdefault(h.doc_id, h)
    fused = dict.fromkeys(first, 0.0)
    for hits, w, floor in zip(results, weights, floors, strict=True):
        if method == "rrf":
            for rank, h in enumerate(hits, start=1):
                fused[h.doc_id] += w / (rrf_k + rank)
            continue
        norm, missing = normalise(hits, normalization, floor, depth)
        for doc_id in fused:
            fused[doc_id] += w * norm.get(doc_id, missing)
    # Ties break by first appearance (the first retriever's order), so results are deterministic.
    order = {d: i for i, d in enumerate(first)}
    top = sorted(fused.items(), key=lambda kv: (-kv[1], order[kv[0]]))[:k]
    return [Hit(first[d].doc_id, first[d].title, first[d].text, float(s)) for d, s in top]


class HybridRetriever(Retriever):
    """Score fusion over retrievers (default order: dense, bm25 with weights 0.6/0.4)."""

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        weights: Sequence[float] | None = None,
        method: str = "weighted",
        depth: int = 20,
        rrf_k: int = 60,
        normalization: str = "theoretical",
        floors: Sequence[float | None] | None = None,
    ):
        if len(retrievers) < 2:
            raise ValueError("a hybrid retriever needs at least two retrievers")
        weights = (
            list(weights)
            if weights is not None
            else (list(DEFAULT_WEIGHTS) if len(retrievers) == 2 else [1.0] * len(retrievers))
        )
        if len(weights) != len(retrievers):
            raise ValueError(f"{len(weights)} weights for {len(retrievers)} retrievers")
        if method not in METHODS:
            raise ValueError(f"fusion method {method!r}: expected one of {METHODS}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization {normalization!r}: expected one of {NORMALIZATIONS}")
        floors = list(floors) if floors is not None else [score_floor(r) for r in retrievers]
        if len(floors) != len(retrievers):
            raise ValueError(f"{len(floors)} score floors for {len(retrievers)} retrievers")
        self.retrievers, self.weights, self.method, self.depth, self.rrf_k = (
            list(retrievers),
            weights,
            method,
            depth,
            rrf_k,
        )
        self.normalization, self.floors = normalization, floors
        parts = "+".join(r.index_id for r in self.retrievers)
        wts = ",".join(f"{w:g}" for w in weights)
        # The normalisation changes rankings, so it is part of the cache key.
        tail = f";k{rrf_k})" if method == "rrf" else f";{normalization})"
        self.index_id = f"{method}({parts};{wts};d{depth}{tail}"

    def _fuse_all(self, per_retriever: list[list[list[Hit]]], n: int, k: int, depth: int) -> list[list[Hit]]:
        return [
            fuse(
                [res[i] for res in per_retriever],
                self.weights,
                k,
                self.method,
                self.rrf_k,
                self.normalization,
                self.floors,
                depth,
            )
            for i in range(n)
        ]

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        return self.retrievers[0].documents(doc_ids)  # every part reads the same passages

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per = [r.search(list(queries), depth) for r in self.retrievers]
        return self._fuse_all(per, len(queries), k, depth)

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per = await asyncio.gather(*(r.asearch(list(queries), depth) for r in self.retrievers))
        return self._fuse_all(list(per), len(queries), k, depth)
