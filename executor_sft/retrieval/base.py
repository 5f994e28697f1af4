"""The one retriever interface every search backend implements.

Agents, the HTTP server, benchmarks and GRPO environments all talk to a `Retriever`;
nothing downstream knows whether it is BM25, FAISS, a fusion, or a remote server.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from executor_sft.retrieval.corpus import Corpus, TitledText


@dataclass(frozen=True, slots=True)
class Hit(TitledText):
    doc_id: str
    title: str
    text: str
    score: float


class Retriever(ABC):
    """Batch search over one index.

    `index_id` names the index contents (not the object) so caches can be keyed by
    (index_id, query, k) across processes.
    """

    index_id: str = "unnamed"

    @abstractmethod
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Return, for each query, up to k hits in descending score order."""

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Async search that never blocks the event loop (CPU-bound backends run in a thread)."""
        return await asyncio.to_thread(self.search, queries, k)

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        """The whole document of each passage id (`Corpus.document`; score 0), None for an
        unknown id: what the executor's access tool reads. Retrievers over an index's passages
        and the HTTP client have it; a retriever kind without passages raises."""
        raise NotImplementedError(f"{type(self).__name__} has no document access")

    async def adocuments(self, doc_ids: list[str]) -> list[Hit | None]:
        return await asyncio.to_thread(self.documents, doc_ids)


class CorpusRetriever(Retriever):
    """A retriever over a `Corpus`'s passages, in one search shape: an empty batch has no hits,
    k is clamped to the corpus, and each query's (rows, scores) from `top_rows` become hits.

    `top_rows` returns, per query, the corpus rows best first with their scores, already
    without the rows that are no hit (BM25: no query term matched; FAISS: padding rows).
    """

    corpus: Corpus

    @abstractmethod
    def top_rows(self, queries: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query, (rows, scores) of at most k hits, best first."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = max(1, min(k, len(self.corpus)))
        out = []
        for rows, scores in self.top_rows(list(queries), k):
            hits = []
            for r, s in zip(rows.tolist(), scores.tolist(), strict=True):
                p = self.corpus[int(r)]
                hits.append(Hit(p.id, p.title, p.text, float(s)))
            out.append(hits)
        return out

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        """Each passage's whole document from the corpus (docs.arrow)."""
        out: list[Hit | None] = []
        for doc_id in doc_ids:
            doc = self.corpus.document(doc_id)
            out.append(None if doc is None else Hit(doc.id, doc.title, doc.text, 0.0))
        return out


NO_ROWS = (np.empty(0, dtype=np.int64), np.empty(0))
"""`top_rows` for a query without hits."""


def top_k_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Rows of the k highest scores, best first; ties go to the lower row.

    Library top-k routines (numpy's argpartition, JAX's top_k, which bm25s picks when JAX is
    installed) order tied scores differently, so the same index gave different passages on
    machines with different packages. The tie-break by row makes results a function of the
    index alone.
    """
    k = min(k, len(scores))
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
    candidates = np.flatnonzero(scores >= threshold)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:k]]
