"""A user's model backend in one file (docs/architecture.md, "A model backend") takes effect in a
real collection: recipes/collect_rollouts.py as a subprocess, its backbone role on the user's
backend wrapping a scripted policy served over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI
from forkserver import run_script

from executor_sft.llm import BACKENDS, ChatModelConfig
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.retrieval.build import build_index
from executor_sft.synthetic import load_world, scripted_models, write_world
from tests.support.docs import write_doc_module
from tests.support.paths import REPO_ROOT

SYSTEM = "Write every sub-query in English."
BACKEND = "system_prompt:BACKEND"


class Recording:
    """A served policy that keeps every conversation it is sent."""

    def __init__(self, inner, seen: list):
        self.inner, self.name, self.seen = inner, inner.name, seen

    async def chat(self, messages, tools=None, sampling=None):
        self.seen.append(messages)
        return await self.inner.chat(messages, tools, sampling)


@pytest.fixture(scope="module")
def world_setup(tmp_path_factory):
    """A small synthetic world, its BM25 index, and one OpenAI-compatible app per scripted role."""
    root = tmp_path_factory.mktemp("backend_world")
    write_world(root / "world", 7, 300, 20)
    build_index(root / "world" / "corpus.jsonl", root / "index")
    seen: list = []
    app = FastAPI()
    for role, model in scripted_models(load_world(root / "world")).items():
        served = Recording(model, seen) if role == "backbone" else model
        app.mount(f"/{role}", create_app(served, served_name=role))
    with BackgroundServer(app) as server:
        yield root, server.base_url.removesuffix("/v1"), seen


def _config(root: Path, base: str, out: Path, **backbone) -> dict:
    def served(role: str) -> dict:
        return {"backend": "openai", "model": role, "base_urls": f"{base}/{role}/v1"}

    return {
        "questions": {"path": str(root / "world" / "questions.jsonl"), "limit": 2},
        "retriever": {"index": str(root / "index"), "kind": "bm25", "k": 3},
        "models": {
            "backbone": {
                "backend": BACKEND,
                "name": "backbone-in-english",
                "system": SYSTEM,
                "inner": served("backbone"),
                **backbone,
            },
            **{role: served(role) for role in ("teacher", "student", "answerer")},
        },
        "output_dir": str(out),
        "concurrency": 2,
    }


def _collect(tmp_path: Path, config: dict) -> subprocess.CompletedProcess[str]:
    write_doc_module("architecture.md", "A model backend", tmp_path, "system_prompt")
    path = tmp_path / "collect.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    pythonpath = os.pathsep.join([str(tmp_path), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    return run_script(
        [sys.executable, "recipes/collect_rollouts.py", "--config", str(path)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_docs_backend_serves_the_backbone_of_a_collection(world_setup, tmp_path):
    root, base, seen = world_setup
    seen.clear()
    out = tmp_path / "out"
    proc = _collect(tmp_path, _config(root, base, out))
    assert proc.returncode == 0, proc.stderr
    episodes = [
        json.loads(line) for line in (out / "rollouts.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(episodes) == 2
    rounds = [r for e in episodes for r in e["rounds"] if r["sub_queries"]]
    assert rounds and all(e["runs"] for e in episodes)  # the backbone's answers reached the executors
    assert {e["config"]["models"]["backbone"] for e in episodes} == {"backbone-in-english"}
    # every conversation the served backbone saw starts with the backend's own system prompt
    assert len(seen) >= len(rounds)
    assert all(m[0]["role"] == "system" and m[0]["content"].startswith(SYSTEM) for m in seen)
    assert all(sum(x["role"] == "system" for x in m) == 1 for m in seen)
    assert not any(SYSTEM in json.dumps(r["backbone"]["messages"]) for e in episodes for r in e["rounds"])


def test_a_field_of_another_backend_on_it_is_a_one_line_error(world_setup, tmp_path):
    root, base, _ = world_setup
    config = tmp_path / "collect.yaml"
    proc = _collect(tmp_path, _config(root, base, tmp_path / "out", dtype="bfloat16"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == (
        f"error: {config}: invalid config: field 'models.backbone.dtype': not a field of backend "
        f"'{BACKEND}'; it belongs to backend 'transformers'"
    )


def test_imported_it_is_a_registered_name_with_its_own_identity(tmp_path, monkeypatch):
    write_doc_module("architecture.md", "A model backend", tmp_path, "system_prompt")
    monkeypatch.syspath_prepend(str(tmp_path))
    import system_prompt

    try:
        cfg = ChatModelConfig.model_validate(
            {"backend": "system_prompt", "system": SYSTEM, "inner": {"model": "m"}}
        )
        assert isinstance(cfg, system_prompt.SystemPromptConfig) and cfg.inner.backend == "openai"
        other = cfg.model_copy(update={"system": "Be brief."})
        assert cfg.identity() != other.identity()
        assert cfg.model_copy(update={"temperature": 0.7}).identity() == cfg.identity()
    finally:
        BACKENDS.unregister("system_prompt")
        sys.modules.pop("system_prompt", None)
