"""Eval fixtures: a BM25 index over ../shared/minibench (built once, then cached)."""

from __future__ import annotations

import pytest

from executor_sft.eval.runner import ensure_index
from executor_sft.retrieval.config import load_retriever
from executor_sft.testing import cache_dir


@pytest.fixture(scope="session")
def minibench_bm25_dir(minibench_corpus_path):
    """BM25 over the real minibench corpus (about 30 s to build the first time on 2 cores)."""
    return ensure_index(cache_dir() / "indexes" / "minibench-bm25", minibench_corpus_path)


@pytest.fixture(scope="session")
def minibench_bm25(minibench_bm25_dir, minibench_corpus_path):
    return load_retriever(minibench_bm25_dir, corpus=minibench_corpus_path)
