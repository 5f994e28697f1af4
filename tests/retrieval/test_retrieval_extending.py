"""A retriever kind of the user's own (docs/architecture.md, "A retriever kind"), in real runs.

The docs' example is saved as the user's file `mykinds.py` and used by its import path, by its
registered name, and by `recipes/serve_retriever.py` in a subprocess; unknown kinds are one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from forkserver import run_script
from pydantic import ValidationError
from retrieval_helpers import free_port

from executor_sft.errors import ConfigError, UserError
from executor_sft.retrieval import RETRIEVERS, build_retriever, load_retriever
from executor_sft.retrieval.config import RetrieverConfig
from tests.support.docs import write_doc_module

ROOT = Path(__file__).resolve().parents[2]
QUERY = "Korean War"  # the corpus holds many passages of this article
K = 5


@pytest.fixture()
def user_kind(tmp_path, monkeypatch):
    """The docs' example as the user's own module `mykinds` in `tmp_path` (on sys.path)."""
    write_doc_module("architecture.md", "A retriever kind", tmp_path, "mykinds")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    RETRIEVERS.unregister("one_per_title")
    sys.modules.pop("mykinds", None)


def titles(hits) -> list[str]:
    return [h.title for h in hits]


def test_docs_kind_by_import_path_and_by_name(bm25_index, user_kind):
    (plain,) = load_retriever(bm25_index, "bm25").search([QUERY], 30)
    assert len(set(titles(plain[:K]))) < K  # plain BM25 repeats an article in its top K

    cfg = {"index": str(bm25_index), "kind": "mykinds:one_per_title", "k": K, "options": {"depth": 30}}
    r = build_retriever(cfg)
    (hits,) = r.search([QUERY], K)
    assert len(hits) == K and len(set(titles(hits))) == K
    assert hits[0] == plain[0]
    best = {}
    for h in plain:
        best.setdefault(h.title, h)
    assert hits == list(best.values())[:K]  # each article's best BM25 passage, in BM25's order
    assert r.index_id.startswith("one_per_title(d30)/bm25-")

    # Importing the file registered the name; it loads the same kind.
    (by_name,) = build_retriever({**cfg, "kind": "one_per_title"}).search([QUERY], K)
    assert by_name == hits


def test_docs_kind_takes_effect_in_the_serve_recipe(bm25_index, user_kind):
    (expected,) = load_retriever(bm25_index, "mykinds:one_per_title", depth=30).search([QUERY], K)
    (plain,) = load_retriever(bm25_index, "bm25").search([QUERY], K)
    port = free_port()
    cmd = [
        sys.executable,
        str(ROOT / "recipes" / "serve_retriever.py"),
        "--index",
        str(bm25_index),
        "--kind",
        "mykinds:one_per_title",
        "--options",
        json.dumps({"depth": 30}),
        "--port",
        str(port),
    ]
    path = os.pathsep.join([str(user_kind), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        health = _wait_for_health(url, proc)
        assert health["kind"] == "mykinds:one_per_title"
        assert health["index_id"].startswith("one_per_title(d30)/bm25-")
        body = {"queries": [QUERY], "topk": K}
        (served,) = httpx.post(f"{url}/retrieve", json=body, timeout=60).json()["result"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [d["id"] for d in served] == [h.doc_id for h in expected]
    assert len({d["contents"].split("\n", 1)[0] for d in served}) == K
    assert [d["id"] for d in served] != [h.doc_id for h in plain]


def _wait_for_health(url: str, proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve_retriever exited {proc.returncode}: {proc.stdout.read()}")
        try:
            return httpx.get(f"{url}/health", timeout=5).json()
        except httpx.TransportError:
            time.sleep(0.5)
    raise AssertionError("serve_retriever did not answer /health within 240 s")


def test_an_unknown_kind_is_a_one_line_user_error(bm25_index):
    with pytest.raises(ValidationError, match="unknown retriever kind 'bm52': did you mean 'bm25'"):
        RetrieverConfig(index=str(bm25_index), kind="bm52")
    with pytest.raises(UserError, match="unknown retriever kind 'bm52'"):
        load_retriever(bm25_index, "bm52")
    with pytest.raises(UserError, match="cannot import module 'no_such_module'"):
        load_retriever(bm25_index, "no_such_module:kind")
    with pytest.raises(ConfigError, match="is a function, not an executor_sft.retrieval.RetrieverKind"):
        load_retriever(bm25_index, "executor_sft.retrieval:load_retriever")


@pytest.mark.parametrize("recipe", ["serve_retriever", "collect_rollouts"])
def test_an_unknown_kind_in_a_recipe_is_one_line(recipe, bm25_index, tmp_path):
    if recipe == "serve_retriever":
        args = ["--index", str(bm25_index), "--kind", "bm52", "--port", "9"]
    else:
        config = tmp_path / "collect.yaml"
        config.write_text(
            f"questions: {{path: {tmp_path / 'q.jsonl'}}}\n"
            f"retriever: {{index: {bm25_index}, kind: bm52}}\n"
            "models: {backbone: {backend: transformers, model: 'offline:smollm2'}}\n"
            f"output_dir: {tmp_path / 'out'}\n",
            encoding="utf-8",
        )
        args = ["--config", str(config)]
    proc = run_script(
        [sys.executable, str(ROOT / "recipes" / f"{recipe}.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "unknown retriever kind 'bm52': did you mean 'bm25'?" in line
