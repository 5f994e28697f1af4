"""Lexical retrieval: bm25s (default: sparse scores, fast, mmap loading) and rank-bm25 (option).

Both tokenize the same way (lowercase, English stopwords, Snowball English stemmer via
PyStemmer) over title + text, so their results are comparable.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np

from executor_sft.retrieval.base import NO_ROWS, CorpusRetriever, top_k_rows
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


def _matched(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top k rows with a positive score (a row no query term matched is no hit)."""
    rows = top_k_rows(scores, k)
    top = scores[rows]
    keep = top > 0
    return rows[keep], top[keep]


class BM25Retriever(CorpusRetriever):
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

    def top_rows(self, queries: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for tokens in tokenize(queries, self.info):
            ids = self.model.get_tokens_ids(tokens)
            out.append(_matched(self.model.get_scores_from_ids(ids), k) if ids else NO_ROWS)
        return out


class RankBM25Retriever(CorpusRetriever):
    """rank-bm25 (BM25Okapi): dense per-query scoring over every document; for compatibility."""

    batch_invariant = True

    def __init__(self, corpus: Corpus, info: BM25Info | None = None, index_id: str = "rank_bm25"):
        from rank_bm25 import BM25Okapi

        self.corpus, self.info, self.index_id = corpus, info or BM25Info(backend="rank_bm25"), index_id
        self.model = BM25Okapi(tokenize(corpus.index_texts(), self.info), k1=self.info.k1, b=self.info.b)

    def top_rows(self, queries: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        tokenized = tokenize(queries, self.info)
        return [_matched(self.model.get_scores(tokens), k) if tokens else NO_ROWS for tokens in tokenized]
