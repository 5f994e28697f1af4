"""Fixtures for the GRPO tests: BM25 over the shared minibench corpus (built once per session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def minibench_bm25(minibench_corpus_path):
    from executor_sft.retrieval import BM25Retriever, load_corpus

    return BM25Retriever.build(load_corpus(minibench_corpus_path))
