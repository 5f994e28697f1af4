"""`engine: ray` with the API key exported only in the driver's shell (issue 55, x03).

The Ray cluster (two real `ray start` nodes) is started without the key; the model server (the
scripted world roles behind an OpenAI-compatible app on 127.0.0.1) answers 401 to a chat request
without it. The recipe, run as a subprocess with the key in its own environment only, collects
every episode, and the key's value is in no file under the output folder nor Ray's temp and log
folders.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fault_helpers import served_models

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.retrieval.build import build_index
from executor_sft.synthetic import scripted_models
from tests.support.recipes import stderr_tail

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "EXECUTOR_SFT_TEST_RAY_KEY"
KEY = "sk-test-" + secrets.token_hex(12)


def files_holding(text: str, *roots: Path) -> list[Path]:
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes():
                found.append(path)
    return found


def test_a_key_only_in_the_drivers_shell_reaches_the_actors_and_no_file(
    ray_cluster, world, world_dir, tmp_path
):
    assert KEY_ENV not in os.environ  # nor in the nodes' environment, which is this process's
    app = FastAPI()

    @app.middleware("http")
    async def needs_the_key(request: Request, call_next):
        if request.url.path.endswith("/chat/completions") and request.headers.get("authorization") != (
            f"Bearer {KEY}"
        ):
            return JSONResponse(status_code=401, content={"error": {"message": "bad key", "code": 401}})
        return await call_next(request)

    for role, model in scripted_models(world).items():
        app.mount(f"/{role}", create_app(model, served_name=role))
    index = tmp_path / "index"
    build_index(world_dir / "corpus.jsonl", index)
    out = tmp_path / "out"
    with BackgroundServer(app) as server:
        base = server.base_url.removesuffix("/v1")
        models = served_models(base, {r: r for r in ("backbone", "teacher", "student", "answerer")})
        for model in models.values():
            model |= {"api_key_env": KEY_ENV, "max_retries": 0}
        config = {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 3},
            "retriever": {"index": str(index), "kind": "bm25", "k": 3},
            "models": models,
            "output_dir": str(out),
            "concurrency": 2,
            "engine": "ray",
            "ray": {"address": ray_cluster.address},
        }
        path = tmp_path / "collect.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", KEY_ENV: KEY}
        proc = subprocess.run(
            [sys.executable, "recipes/collect_rollouts.py", "--config", str(path)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    episodes = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(episodes) == 3 and all(e["stop_reason"] != "error" for e in episodes)
    assert KEY not in proc.stdout + proc.stderr
    assert files_holding(KEY, out, tmp_path / "collect.yaml", ray_cluster.ray_temp, ray_cluster.root) == []
