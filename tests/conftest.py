"""Shared fixtures: offline models and the shared minibench data (read from ../shared)."""

from __future__ import annotations

import os

import pytest

from executor_sft import testing

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def minibench_corpus_path():
    path = testing.minibench_corpus()
    assert path.exists(), f"shared data missing: {path} (tests read ../shared/minibench)"
    return path


@pytest.fixture(scope="session")
def minibench_questions_path():
    path = testing.minibench_questions()
    assert path.exists(), f"shared data missing: {path}"
    return path


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
