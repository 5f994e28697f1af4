"""Lexical retrieval: bm25s (default: sparse scores, fast, mmap loading) and rank-bm25 (option).

Both tokenize the same way (lowercase, English stopwords, Snowball English stemmer via
PyStemmer) over title + text, so their results are comparable.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np

from executor_sft.retrieval.base import Hit, Retriever, corpus_documents, top_k_rows
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.manifest import BM25Info


def _bm25s():
    """bm25s, with its logger back to the application's level (bm25s sets it to DEBUG on import,
    which prints `DEBUG:bm25s:...` lines into every run)."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


@functools.lru_cache(maxsize=4)
def _stemmer(language: str | None):
    if not language:
        return None
    import Stemmer

    return Stemmer.Stemmer(language)


def tokenize(texts: list[str], info: BM25Info, show_progress: bool = False) -> list[list[str]]:
    bm25s = _bm25s()

    stemmer = _stemmer(info.stemmer)
    stem = stemmer.stemWords if stemmer else None
    return bm25s.tokenize(
        texts, stopwords=info.stopwords, stemmer=stem, return_ids=False, show_progress=show_progress
    )


def _hits(corpus: Corpus, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
    out = []
    for r, s in zip(rows.tolist(), scores.tolist(), strict=True):
        if s <= 0:  # no query term matched: not a hit
            continue
        p = corpus[int(r)]
        out.append(Hit(p.id, p.title, p.text, float(s)))
    return out


class BM25Retriever(Retriever):
    """bm25s over an index directory's `bm25/` folder (memory-mapped by default)."""

    batch_invariant = True
    """Each query's hits are the same whatever else is in the batch (so a cache may batch callers)."""

    def __init__(self, model, corpus: Corpus, info: BM25Info, index_id: str = "bm25"):
        self.model, self.corpus, self.info, self.index_id = model, corpus, info, index_id

    @classmethod
    def build(
        cls, corpus: Corpus, info: BM25Info | None = None, show_progress: bool = False
    ) -> BM25Retriever:
        bm25s = _bm25s()

        info = info or BM25Info()
        model = bm25s.BM25(k1=info.k1, b=info.b, method=info.method)
        model.index(tokenize(corpus.index_texts(), info, show_progress), show_progress=show_progress)
        return cls(model, corpus, info)

    def save(self, directory: str | Path) -> None:
        self.model.save(str(directory), show_progress=False)

    @classmethod
    def load(
        cls, directory: str | Path, corpus: Corpus, info: BM25Info, mmap: bool = True, index_id: str = "bm25"
    ):
        bm25s = _bm25s()

        model = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False)
        return cls(model, corpus, info, index_id)

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        return corpus_documents(self.corpus, doc_ids)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = max(1, min(k, len(self.corpus)))
        results: list[list[Hit]] = []
        for tokens in tokenize(list(queries), self.info):
            ids = self.model.get_tokens_ids(tokens)
            if not ids:
                results.append([])
                continue
            scores = self.model.get_scores_from_ids(ids)
            rows = top_k_rows(scores, k)
            results.append(_hits(self.corpus, rows, scores[rows]))
        return results


class RankBM25Retriever(Retriever):
    """rank-bm25 (BM25Okapi): dense per-query scoring over every document; for compatibility."""

    batch_invariant = True

    def __init__(self, corpus: Corpus, info: BM25Info | None = None, index_id: str = "rank_bm25"):
        from rank_bm25 import BM25Okapi

        self.corpus, self.info, self.index_id = corpus, info or BM25Info(backend="rank_bm25"), index_id
        self.model = BM25Okapi(tokenize(corpus.index_texts(), self.info), k1=self.info.k1, b=self.info.b)

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        return corpus_documents(self.corpus, doc_ids)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = max(1, min(k, len(self.corpus)))
        out = []
        for tokens in tokenize(list(queries), self.info):
            if not tokens:
                out.append([])
                continue
            scores = self.model.get_scores(tokens)
            top = top_k_rows(scores, k)
            out.append(_hits(self.corpus, top, scores[top]))
        return out
