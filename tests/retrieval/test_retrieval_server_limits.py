"""The retrieval server's request limits over real HTTP: body size (413) and query length (422)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest
from forkserver import run_script
from retrieval_helpers import serve

from executor_sft.retrieval import build_index, load_retriever
from executor_sft.retrieval.server import ServerConfig, create_app

TOPICS = ("apple orchard", "river delta", "granite quarry", "jazz trumpet", "tidal marsh")


@pytest.fixture(scope="module")
def index_root(tmp_path_factory) -> Path:
    """A folder holding corpus.jsonl (five passages) and its BM25 index in index/."""
    root = tmp_path_factory.mktemp("limits")
    corpus = root / "corpus.jsonl"
    rows = [{"id": str(i), "title": t, "text": f"Notes about the {t}."} for i, t in enumerate(TOPICS)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    build_index(corpus, root / "index", bm25=True)
    return root


@pytest.fixture(scope="module")
def small_bm25(index_root):
    return load_retriever(index_root / "index", "bm25")


@pytest.fixture(scope="module")
def server(small_bm25):
    config = ServerConfig(max_query_chars=64, max_body_bytes=2000, max_wait_ms=1)
    with serve(create_app(small_bm25, config, kind="bm25")) as url:
        yield url


def test_requests_within_the_limits_are_answered(server):
    r = httpx.post(f"{server}/retrieve", json={"queries": ["x" * 40 + " jazz trumpet"], "topk": 1})
    assert r.status_code == 200
    assert r.json()["result"][0][0]["id"] == "3"


def test_a_body_over_the_limit_gets_413(server):
    r = httpx.post(f"{server}/retrieve", json={"queries": ["jazz"] * 400, "topk": 1})
    assert r.status_code == 413 and "Content Too Large" in r.text


def test_a_chunked_body_over_the_limit_gets_413(server):
    body = json.dumps({"queries": ["jazz"] * 400, "topk": 1}).encode()
    chunks = (body[i : i + 256] for i in range(0, len(body), 256))  # no content-length: chunked
    r = httpx.post(f"{server}/retrieve", content=chunks, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "Content Too Large" in r.text


def test_a_query_over_the_limit_gets_422_naming_it(server):
    r = httpx.post(f"{server}/retrieve", json={"queries": ["jazz", "q" * 65], "topk": 1})
    assert r.status_code == 422
    assert r.json()["detail"] == "queries.1: 65 characters exceed the limit of 64 per query"
    assert httpx.get(f"{server}/health").json()["status"] == "ok"


def test_default_limits_refuse_a_10mb_query(small_bm25):
    config = ServerConfig()
    assert config.max_body_bytes < 10 << 20
    with serve(create_app(small_bm25, config, kind="bm25")) as url:
        big = httpx.post(f"{url}/retrieve", json={"queries": ["a" * (10 << 20)], "topk": 1})
        long = httpx.post(
            f"{url}/retrieve", json={"queries": ["a" * (config.max_query_chars + 1)], "topk": 1}
        )
    assert big.status_code == 413
    assert long.status_code == 422 and "per query" in long.json()["detail"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--index", "{root}/no-such-index"], "no-such-index/manifest.json not found"),
        (["--index", "{root}/index", "--options", "not-json"], "--options: not JSON"),
    ],
)
def test_serve_recipe_bad_input_is_one_line(index_root, args, needle):
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "serve_retriever.py"
    cmd = [sys.executable, str(recipe), *(a.format(root=index_root) for a in args), "--port", "9"]
    proc = run_script(
        cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and needle in line
