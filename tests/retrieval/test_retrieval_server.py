"""The HTTP server over real HTTP (uvicorn on 127.0.0.1) and the client's retries."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from retrieval_helpers import free_port, serve, serve_recipe

from executor_sft.retrieval import (
    Hit,
    RemoteRetriever,
    RetrievalError,
    RetrievalRefused,
    Retriever,
    load_retriever,
)
from executor_sft.retrieval.server import MicroBatcher, ServerConfig, create_app


@pytest.fixture(scope="module")
def bm25(bm25_index):
    return load_retriever(bm25_index, "bm25")


@pytest.fixture(scope="module")
def server(bm25):
    with serve(create_app(bm25, ServerConfig(max_queries=8, max_k=20, max_wait_ms=20), kind="bm25")) as url:
        yield url


def test_health_and_wire_format(server, bm25):
    h = httpx.get(f"{server}/health").json()
    assert h["status"] == "ok" and h["index_id"] == bm25.index_id
    q = "Canadian rock band drummer Modern Drummer Hall of Fame"
    r = httpx.post(f"{server}/retrieve", json={"queries": [q], "topk": 3, "return_scores": True}).json()
    (row,) = r["result"]
    expected = bm25.search([q], 3)[0]
    assert [x["document"]["id"] for x in row] == [h.doc_id for h in expected]
    assert row[0]["document"]["contents"] == f"{expected[0].title}\n{expected[0].text}"
    assert row[0]["score"] == pytest.approx(expected[0].score)
    plain = httpx.post(f"{server}/retrieve", json={"queries": [q], "topk": 3}).json()
    assert plain["result"][0][0] == {"id": expected[0].doc_id, "contents": expected[0].contents}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"topk": 3}, "queries"),
        ({"queries": ["a"], "topk": 0}, "topk"),
        ({"queries": ["a"], "topk": 21}, "limit of 20"),
        ({"queries": ["a"] * 9, "topk": 3}, "limit of 8"),
        ({"queries": "not a list", "topk": 3}, "queries"),
    ],
)
def test_bad_requests_get_readable_422(server, body, needle):
    r = httpx.post(f"{server}/retrieve", json=body)
    assert r.status_code == 422
    assert needle in r.json()["detail"]


async def test_concurrent_requests_are_batched(server, bm25, dev_questions):
    qs = [q["question"] for q in dev_questions[:24]]
    before = httpx.get(f"{server}/health").json()
    async with httpx.AsyncClient(timeout=60) as client:
        replies = await asyncio.gather(
            *(
                client.post(
                    f"{server}/retrieve", json={"queries": [q], "topk": 2 + i % 3, "return_scores": True}
                )
                for i, q in enumerate(qs)
            )
        )
    after = httpx.get(f"{server}/health").json()
    assert all(r.status_code == 200 for r in replies)
    expected = bm25.search(qs, 4)
    for i, (r, exp) in enumerate(zip(replies, expected, strict=True)):
        assert [x["document"]["id"] for x in r.json()["result"][0]] == [h.doc_id for h in exp[: 2 + i % 3]]
    requests = after["requests"] - before["requests"]
    calls = after["retriever_calls"] - before["retriever_calls"]
    assert requests == 24 and calls < requests  # several requests shared one retriever call


async def test_remote_retriever_matches_local(server, bm25, dev_questions):
    remote = RemoteRetriever(server)
    assert remote.index_id == bm25.index_id
    qs = [q["question"] for q in dev_questions[:3]]
    local = bm25.search(qs, 3)
    for got in (remote.search(qs, 3), await remote.asearch(qs, 3)):
        assert [[h.doc_id for h in x] for x in got] == [[h.doc_id for h in x] for x in local]
        assert got[0][0].title == local[0][0].title and got[0][0].text == local[0][0].text
        assert got[0][0].score == pytest.approx(local[0][0].score)
    with pytest.raises(RetrievalRefused, match="422"):  # this request's own fault: not an outage
        remote.search(["x"] * 9, 3)
    remote.close()


def test_batching_off_serves_the_same_results(bm25):
    with serve(create_app(bm25, ServerConfig(batching=False))) as url:
        r = RemoteRetriever(url).search(["Toto drummer session musician"], 3)
    assert [h.doc_id for h in r[0]] == [
        h.doc_id for h in bm25.search(["Toto drummer session musician"], 3)[0]
    ]


def flaky_app(failures: int) -> FastAPI:
    app = FastAPI()
    app.state.calls = 0

    @app.post("/retrieve")
    async def retrieve(body: dict):
        app.state.calls += 1
        if app.state.calls <= failures:
            return JSONResponse(status_code=500, content={"detail": "boom"})
        return {
            "result": [
                [{"document": {"id": "d1", "contents": '"Title"\nBody text'}, "score": 1.5}]
                for _ in body["queries"]
            ]
        }

    return app


async def test_client_retries_5xx_then_succeeds():
    app = flaky_app(failures=2)
    with serve(app) as url:
        remote = RemoteRetriever(url, backoff_s=0.01, max_retries=3, index_id="flaky")
        (hits,) = remote.search(["q"], 1)
        assert (hits[0].doc_id, hits[0].title, hits[0].text, hits[0].score) == (
            "d1",
            "Title",
            "Body text",
            1.5,
        )
        assert app.state.calls == 3
        app.state.calls = 0
        (hits,) = await remote.asearch(["q"], 1)
        assert app.state.calls == 3 and hits[0].doc_id == "d1"
        app.state.calls = 0
        with pytest.raises(RetrievalError, match="after 2 attempts: HTTP 500"):
            RemoteRetriever(url, backoff_s=0.01, max_retries=1, index_id="x").search(["q"], 1)


async def test_client_gives_up_on_refused_connections():
    port = free_port()
    with socket.socket() as s:  # nothing listens on this port
        assert s.connect_ex(("127.0.0.1", port)) != 0
    remote = RemoteRetriever(f"http://127.0.0.1:{port}", backoff_s=0.01, max_retries=2)
    assert remote.index_id == f"remote:http://127.0.0.1:{port}"
    with pytest.raises(RetrievalError, match="after 3 attempts: ConnectError"):
        remote.search(["q"], 1)
    with pytest.raises(RetrievalError, match="ConnectError"):
        await remote.asearch(["q"], 1)


async def test_client_reaches_a_server_that_comes_up_late(bm25):
    """Connection refused at first, then the server starts: the backoff bridges the gap."""
    port = free_port()
    remote = RemoteRetriever(f"http://127.0.0.1:{port}", backoff_s=0.2, max_retries=6, index_id="late")
    server = serve(create_app(bm25), port=port)

    async def start_later():
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.__enter__)

    starter = asyncio.create_task(start_later())
    try:
        hits = await remote.asearch(["Toto drummer"], 2)
        assert len(hits[0]) == 2
    finally:
        await starter
        server.__exit__(None, None, None)


class RecordingRetriever(Retriever):
    """Real BM25 underneath; records the size of every call the batcher makes."""

    def __init__(self, inner: Retriever):
        self.inner, self.index_id, self.sizes = inner, inner.index_id, []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.sizes.append(len(queries))
        return self.inner.search(queries, k)


async def test_batcher_caps_batches_and_wakes_when_full(bm25, dev_questions):
    qs = [q["question"] for q in dev_questions[:10]]
    rec = RecordingRetriever(bm25)
    batcher = MicroBatcher(rec, max_batch=4, max_wait_ms=10_000)  # only a full batch can start early
    batcher.start()
    try:
        t = time.monotonic()
        results = await asyncio.gather(*(batcher.submit([q], 2) for q in qs[:8]))
        assert time.monotonic() - t < 5  # two full batches, no 10 s wait
        assert rec.sizes == [4, 4]
        assert [[h.doc_id for h in r[0]] for r in results] == [
            [h.doc_id for h in x] for x in bm25.search(qs[:8], 2)
        ]
    finally:
        await batcher.stop()
    rec.sizes.clear()
    batcher = MicroBatcher(rec, max_batch=4, max_wait_ms=0)
    batcher.start()
    try:  # a request over max_batch is split: no retriever call holds more than max_batch queries
        big = await batcher.submit(qs[:10], 3)
        assert sorted(rec.sizes) == [2, 4, 4] and len(big) == 10
        assert [[h.doc_id for h in hits] for hits in big] == [
            [h.doc_id for h in x] for x in bm25.search(qs[:10], 3)
        ]
    finally:
        await batcher.stop()


async def test_batcher_runs_a_lone_request_after_max_wait(bm25):
    rec = RecordingRetriever(bm25)
    batcher = MicroBatcher(rec, max_batch=64, max_wait_ms=5)
    batcher.start()
    try:
        (hits,) = await batcher.submit(["Toto drummer"], 2)
        (again,) = await batcher.submit(["Toto drummer"], 2)
        assert rec.sizes == [1, 1] and [h.doc_id for h in hits] == [h.doc_id for h in again]
    finally:
        await batcher.stop()


def test_a_search_r1_training_batch_with_a_null_topk_in_one_request(bm25):
    """Search-R1's client posts every active trajectory's query at once (its training batch of 512)
    and may leave topk null: the default server takes it, in retriever calls of max_batch queries."""
    queries = [f"drummer of a Canadian rock band {i}" for i in range(512)]
    app = create_app(bm25, ServerConfig(max_wait_ms=0), kind="bm25")
    with serve(app) as url:
        body = httpx.post(f"{url}/retrieve", json={"queries": queries, "topk": None}, timeout=120).json()
        health = httpx.get(f"{url}/health").json()
    assert len(body["result"]) == 512 and all(len(hits) == 3 for hits in body["result"])
    assert body["result"][7] == [
        {"id": h.doc_id, "contents": h.contents} for h in bm25.search([queries[7]], 3)[0]
    ]
    assert health["retriever_calls"] == 512 // ServerConfig.max_batch


def test_search_r1_request_shape_with_512_queries_against_the_served_recipe(bm25, bm25_index):
    """`recipes/serve_retriever.py` as a subprocess, sent what Search-R1's client sends for a
    training batch: 512 queries in one `POST /retrieve` with `topk` and `return_scores: true`, then
    read the way it reads them (`result[i][j]["document"]["contents"]`)."""
    with serve_recipe(bm25_index, "--kind", "bm25") as (url, _):
        queries = [f"who played drums for the Canadian rock band, take {i}" for i in range(512)]
        response = httpx.post(
            f"{url}/retrieve", json={"queries": queries, "topk": 3, "return_scores": True}, timeout=300
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        # A turn where no rollout searched: its `batch_search([])`, which reads `["result"]`.
        empty = httpx.post(f"{url}/retrieve", json={"queries": [], "topk": 3, "return_scores": True})
        assert (empty.status_code, empty.json()) == (200, {"result": []})
    assert len(result) == 512 and all(len(hits) == 3 for hits in result)
    expected = bm25.search([queries[300]], 3)[0]
    assert [hit["document"]["contents"] for hit in result[300]] == [h.contents for h in expected]
    assert [hit["score"] for hit in result[300]] == pytest.approx([h.score for h in expected])


def search_r1_passages(result: list[dict]) -> str:
    """How Search-R1's client reads one query's answer (`_passages2string`): title and text from
    each hit's `document.contents`."""
    lines = []
    for i, item in enumerate(result):
        title, _, text = item["document"]["contents"].partition("\n")
        lines.append(f"Doc {i + 1}(Title: {title}) {text}")
    return "\n".join(lines)


@pytest.mark.parametrize("topk", [3, None])
def test_an_empty_search_r1_batch_gets_an_empty_result(server, topk):
    """Search-R1's `execute_predictions` calls `batch_search([])` on a turn where no rollout
    searched: it posts `{"queries": [], "topk": ..., "return_scores": true}` and reads
    `.json()["result"]`, as its own server answers. A 422 there was its `KeyError: 'result'`."""
    payload = {"queries": [], "topk": topk, "return_scores": True}
    response = httpx.post(f"{server}/retrieve", json=payload)
    assert response.status_code == 200 and response.json() == {"result": []}
    assert [search_r1_passages(r) for r in response.json()["result"]] == []
    # The server goes on answering searches.
    q = "Canadian rock band drummer"
    (row,) = httpx.post(f"{server}/retrieve", json={**payload, "queries": [q]}).json()["result"]
    assert search_r1_passages(row).startswith("Doc 1(Title: ")
