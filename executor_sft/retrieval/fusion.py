"""Hybrid retrieval: fuse a lexical and a dense retriever (or any two or more) per query.

- `weighted`: each retriever's scores are min-max normalised per query over the union of the
  candidates; a candidate a retriever did not return gets 0 from it (it scored at most that
  retriever's minimum). Fused score = sum of weight * normalised score.
- `rrf`: reciprocal rank fusion, score = sum of weight / (rrf_k + rank), rank from 1.
Each retriever is asked for `depth` candidates (default max(k, 20)) so fusion can promote
documents that neither ranks at the very top.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from executor_sft.retrieval.base import Hit, Retriever

DEFAULT_WEIGHTS = (0.6, 0.4)  # dense, bm25


def _minmax(hits: list[Hit]) -> dict[str, float]:
    if not hits:
        return {}
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    span = hi - lo
    return {h.doc_id: (h.score - lo) / span if span > 0 else 1.0 for h in hits}


def fuse(
    results: Sequence[list[Hit]], weights: Sequence[float], k: int, method: str = "weighted", rrf_k: int = 60
) -> list[Hit]:
    """Fuse one query's hit lists (one list per retriever) into the top k."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits, w in zip(results, weights, strict=True):
        if method == "weighted":
            contrib = _minmax(hits)
        elif method == "rrf":
            contrib = {h.doc_id: 1.0 / (rrf_k + rank) for rank, h in enumerate(hits, start=1)}
        else:
            raise ValueError(f"fusion method {method!r}: expected weighted or rrf")
        for h in hits:
            first.setdefault(h.doc_id, h)
        for doc_id, s in contrib.items():
            fused[doc_id] = fused.get(doc_id, 0.0) + w * s
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
        if method not in ("weighted", "rrf"):
            raise ValueError(f"fusion method {method!r}: expected weighted or rrf")
        self.retrievers, self.weights, self.method, self.depth, self.rrf_k = (
            list(retrievers),
            weights,
            method,
            depth,
            rrf_k,
        )
        parts = "+".join(r.index_id for r in self.retrievers)
        wts = ",".join(f"{w:g}" for w in weights)
        self.index_id = f"{method}({parts};{wts};d{depth}" + (f";k{rrf_k})" if method == "rrf" else ")")

    def _fuse_all(self, per_retriever: list[list[list[Hit]]], n: int, k: int) -> list[list[Hit]]:
        return [
            fuse([res[i] for res in per_retriever], self.weights, k, self.method, self.rrf_k)
            for i in range(n)
        ]

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per = [r.search(list(queries), depth) for r in self.retrievers]
        return self._fuse_all(per, len(queries), k)

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per = await asyncio.gather(*(r.asearch(list(queries), depth) for r in self.retrievers))
        return self._fuse_all(list(per), len(queries), k)
