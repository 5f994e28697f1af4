"""Fixtures shared by the multi-agent GRPO tests."""

import pytest


@pytest.fixture(scope="session")
def wide_world(tmp_path_factory):
    """The synthetic world with wide (table) tasks, its directory and a BM25 retriever over it."""
    from executor_sft.retrieval import build_index
    from executor_sft.retrieval.config import load_retriever
    from executor_sft.synthetic.world import write_world

    root = tmp_path_factory.mktemp("marl-world")
    world = write_world(root / "world", seed=0, n_entities=200, n_questions=40, wide_share=0.3)
    build_index(root / "world" / "corpus.jsonl", root / "index", bm25=True)
    return root / "world", world, load_retriever(root / "index", corpus=root / "world" / "corpus.jsonl")
