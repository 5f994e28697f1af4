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


@pytest.fixture(scope="module")
def scripted_endpoints(world, world_dir, tmp_path_factory):
    """(base url, index dir): each scripted world role (backbone, teacher, student, answerer, judge)
    served at `<base>/<role>/v1` by an OpenAI-compatible app on 127.0.0.1, and a BM25 index."""
    from fastapi import FastAPI

    from executor_sft.llm.server import BackgroundServer, create_app
    from executor_sft.retrieval.build import build_index
    from executor_sft.synthetic import scripted_models

    index = tmp_path_factory.mktemp("scripted_index") / "index"
    build_index(world_dir / "corpus.jsonl", index)
    app = FastAPI()
    for role, model in scripted_models(world).items():
        app.mount(f"/{role}", create_app(model, served_name=role))
    with BackgroundServer(app) as server:
        yield server.base_url.removesuffix("/v1"), index
