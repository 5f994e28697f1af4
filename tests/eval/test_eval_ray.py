"""engine: ray for evaluation on a real two-node local Ray cluster: actors build the configured
endpoint models and the on-disk index themselves, and the results match one process's."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI

from executor_sft.eval import run_eval
from executor_sft.eval.config import EvalConfig
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.retrieval.build import build_index
from executor_sft.store import read_episodes
from executor_sft.synthetic import load_world, scripted_models, write_world

pytestmark = pytest.mark.slow
ROLES = {"backbone": "backbone", "answerer": "answerer", "executor": "teacher"}
"""Eval role -> the scripted world role that serves it."""


@pytest.fixture(scope="module")
def served_world(tmp_path_factory):
    """(base url, index dir, questions file): the world's scripted roles behind one HTTP server."""
    root = tmp_path_factory.mktemp("eval_ray_world")
    write_world(root, 11, 200, 40)
    build_index(root / "corpus.jsonl", root / "index", bm25=True)
    models = scripted_models(load_world(root), noise=0.2)
    app = FastAPI()
    for role, world_role in ROLES.items():
        app.mount(f"/{role}", create_app(models[world_role], served_name=role))
    with BackgroundServer(app) as server:
        yield server.base_url.removesuffix("/v1"), root / "index", root / "questions.jsonl"


WALL_CLOCK = ("latency", "t_search", "research")
"""Averages that are wall-clock times: they differ from run to run."""


def _config(served_world, out, **extra) -> EvalConfig:
    base, index, questions = served_world
    return EvalConfig.model_validate(
        {
            "name": "on-ray",
            "output_dir": str(out),
            "questions": [{"path": str(questions), "limit": 20}],
            "samples": 2,
            "concurrency": 4,
            "retriever": {"index": str(index), "kind": "bm25", "k": 3},
            "models": {
                role: {"backend": "openai", "model": role, "base_urls": f"{base}/{role}/v1"} for role in ROLES
            },
            "plots": False,
            **extra,
        }
    )


def test_an_evaluation_on_ray_matches_one_process(ray_cluster, served_world, tmp_path):
    local = run_eval(_config(served_world, tmp_path / "local"), progress=False)
    on_ray = run_eval(_config(served_world, tmp_path / "ray", engine="ray"), progress=False)

    assert on_ray.ran == local.ran == 40 and not on_ray.failed
    ids = {r["episode_id"] for r in read_episodes(tmp_path / "ray" / "episodes.jsonl")}
    assert ids == {r["episode_id"] for r in read_episodes(tmp_path / "local" / "episodes.jsonl")}

    def untimed(results) -> dict:
        return {k: v for k, v in results.average.items() if not k.startswith(WALL_CLOCK)}

    average = untimed(on_ray.results)
    assert average == untimed(local.results)
    assert 0 < average["em"] < 1  # noise makes some answers wrong: the comparison can tell
    assert json.loads((tmp_path / "ray" / "results.json").read_text())["meta"]["episodes"] == 40
