"""Shared fixtures: offline models and the shared data (minibench, the paper's splits).

Tests that read the shared data carry the `shared_data` marker (added automatically for the
fixtures below) and are skipped, with one line saying why, where that data is absent.
"""

from __future__ import annotations

import os

import pytest

from executor_sft import testing

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


SHARED_FIXTURES = {"minibench_corpus_path", "minibench_questions_path", "seed_splits_path"}
"""Fixtures that read the shared data; a test that uses one (even indirectly) is a shared_data test."""


def shared_data_missing() -> str | None:
    """The one-line skip reason when the shared data is absent, else None."""
    needed = [testing.minibench_corpus(), testing.minibench_questions(), testing.seed_splits_dir()]
    missing = [p for p in needed if not p.exists()]
    if not missing:
        return None
    return (
        f"shared data absent ({missing[0]}): set EXECUTOR_SFT_SHARED to the folder holding minibench/ "
        "(Wikipedia passages + multi-hop questions) and seed_splits/ (the paper's question splits)"
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SHARED_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.shared_data)
    reason = shared_data_missing()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("shared_data"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def minibench_corpus_path():
    return testing.minibench_corpus()


@pytest.fixture(scope="session")
def minibench_questions_path():
    return testing.minibench_questions()


@pytest.fixture(scope="session")
def seed_splits_path():
    return testing.seed_splits_dir()


@pytest.fixture()
def tiny_model():
    """A fresh random tiny Qwen3 (model, tokenizer); cheap enough to build per test."""
    return testing.tiny_qwen3()


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    return testing.qwen3_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (model, tokenizer); session-scoped because it takes seconds to load."""
    return testing.smollm2_instruct()


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """A real two-node Ray cluster on 127.0.0.1 (head + one worker node, one CPU each), this
    process connected to it; torn down at the end (only these nodes' process groups)."""
    pytest.importorskip("ray")
    from executor_sft.testing.ray_cluster import LocalRayCluster

    cluster = LocalRayCluster(tmp_path_factory.mktemp("ray"))
    try:
        cluster.start_head()
        cluster.add_node()
        cluster.connect(nodes=2)
        yield cluster
    finally:
        cluster.stop()
