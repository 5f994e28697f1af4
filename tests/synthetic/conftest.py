"""One small generated world and a real BM25 index over it, shared by the synthetic tests."""

from __future__ import annotations

import pytest

from executor_sft.retrieval import BM25Retriever, load_corpus
from executor_sft.synthetic import load_world, write_world

SEED, N_ENTITIES, N_QUESTIONS = 7, 300, 120


@pytest.fixture(scope="session")
def world_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic_world")
    write_world(out, SEED, N_ENTITIES, N_QUESTIONS)
    return out


@pytest.fixture(scope="session")
def world(world_dir):
    return load_world(world_dir)


@pytest.fixture(scope="session")
def bm25(world_dir):
    return BM25Retriever.build(load_corpus(world_dir / "corpus.jsonl"))
