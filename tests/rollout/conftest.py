"""Rollout fixtures: a small synthetic world with a real BM25 index, and the bench's model doubles."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_modules import load_script

from executor_sft.data import load_questions
from executor_sft.retrieval import BM25Retriever, load_corpus
from executor_sft.synthetic import load_world, write_world

REPO = Path(__file__).resolve().parents[2]
SEED, N_ENTITIES, N_QUESTIONS = 7, 300, 120


@pytest.fixture(scope="session")
def world_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rollout_world")
    write_world(out, SEED, N_ENTITIES, N_QUESTIONS)
    return out


@pytest.fixture(scope="session")
def world(world_dir):
    return load_world(world_dir)


@pytest.fixture(scope="session")
def world_questions(world_dir):
    return load_questions(world_dir / "questions.jsonl")


@pytest.fixture(scope="session")
def world_bm25(world_dir):
    return BM25Retriever.build(load_corpus(world_dir / "corpus.jsonl"))


@pytest.fixture(scope="session")
def shapes():
    """bench/rollout_bench.py as a module: its fixed-shape doubles have hand-countable calls and tokens."""
    return load_script("bench/rollout_bench.py", name="rollout_bench")
