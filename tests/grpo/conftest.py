"""Fixtures for the GRPO tests: BM25 over the shared minibench corpus and a tiny Qwen3 on disk (once each)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def minibench_bm25(minibench_corpus_path):
    from executor_sft.retrieval import BM25Retriever, load_corpus

    return BM25Retriever.build(load_corpus(minibench_corpus_path))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random Qwen3 and its tokenizer, saved as a checkpoint directory."""
    from executor_sft.testing import tiny_qwen3

    model, tok = tiny_qwen3(seed=1)
    path = tmp_path_factory.mktemp("tiny_qwen3")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def world_index(tmp_path_factory):
    """A BM25 index directory over the sample world's corpus (data/world/corpus.jsonl)."""
    from grpo_helpers import build_world_index

    return build_world_index(tmp_path_factory.mktemp("world") / "index")


@pytest.fixture(scope="session")
def sft_output(tmp_path_factory):
    from grpo_helpers import make_sft_output

    return make_sft_output(tmp_path_factory.mktemp("sft"))
