"""A big `/retrieve` is searched and sent a chunk at a time, off the event loop: the answer is the
same, `/health` stays quick while it runs, memory goes back afterwards, and a failure or a client
that leaves mid-answer costs only that request. Real HTTP on 127.0.0.1 over the minibench index."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from retrieval_helpers import serve, serve_recipe

from executor_sft.retrieval import RemoteRetriever, RetrievalError, load_retriever
from executor_sft.retrieval.server import ServerConfig, create_app


@pytest.fixture(scope="module")
def bm25(bm25_index):
    return load_retriever(bm25_index, "bm25")


def numbered(questions: list[dict], n: int) -> list[str]:
    """n different queries: the dev questions in turn, each with its number."""
    return [f"{questions[i % len(questions)]['question']} ({i})" for i in range(n)]


@pytest.mark.parametrize("batching", [True, False])
@pytest.mark.parametrize("return_scores", [True, False])
def test_a_request_of_several_chunks_gets_the_whole_answer_in_order(
    bm25, dev_questions, batching, return_scores
):
    queries = numbered(dev_questions, 41)  # chunks of 16, 16 and 9
    config = ServerConfig(max_batch=16, max_wait_ms=0, batching=batching)
    with serve(create_app(bm25, config, kind="bm25")) as url:
        r = httpx.post(
            f"{url}/retrieve", json={"queries": queries, "topk": 4, "return_scores": return_scores}
        )
        health = httpx.get(f"{url}/health").json()
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    result = r.json()["result"]
    expected = bm25.search(queries, 4)
    assert len(result) == 41
    if return_scores:
        assert [[x["document"]["id"] for x in row] for row in result] == [
            [h.doc_id for h in e] for e in expected
        ]
        assert result[40][0]["score"] == pytest.approx(expected[40][0].score)
    else:
        assert result == [[{"id": h.doc_id, "contents": h.contents} for h in e] for e in expected]
    assert health["retriever_calls"] == 3


class FailsEvery:
    """The minibench BM25 index, raising on every `n`th search (never for 0): a retriever that
    breaks mid-answer."""

    def __init__(self, inner, n: int):
        self.inner, self.n, self.calls = inner, n, 0
        self.index_id = inner.index_id

    async def asearch(self, queries, k):
        self.calls += 1
        if self.n and self.calls % self.n == 0:
            raise RuntimeError("index shard went away")
        return await self.inner.asearch(queries, k)


def test_a_search_failing_mid_answer_cuts_it_and_the_client_retries(bm25, dev_questions):
    """The status went out with the first chunk, so a later chunk's failure can only cut the body:
    the client reads that as an outage (retried), never as a short answer."""
    queries = numbered(dev_questions, 40)
    failing = FailsEvery(bm25, n=2)
    config = ServerConfig(max_batch=16, max_wait_ms=0, batching=False)
    with serve(create_app(failing, config, kind="bm25")) as url:
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(f"{url}/retrieve", json={"queries": queries, "topk": 3})
        client = RemoteRetriever(url, max_retries=1, backoff_s=0.01)
        failing.calls = 0
        with pytest.raises(RetrievalError, match="RemoteProtocolError"):
            client.search(queries, 3)
        assert failing.calls == 4  # two attempts, each cut after its second chunk
        failing.n = 0  # healthy again: the same request is answered whole
        assert [[h.doc_id for h in row] for row in client.search(queries, 3)] == [
            [h.doc_id for h in row] for row in bm25.search(queries, 3)
        ]
        # The first chunk failing is a plain 500, before any byte of the answer.
        failing.calls, failing.n = 0, 1
        assert httpx.post(f"{url}/retrieve", json={"queries": queries, "topk": 3}).status_code == 500


def test_a_client_leaving_mid_answer_stops_its_searches(bm25, dev_questions):
    queries = numbered(dev_questions, 16 * 20)
    counting = FailsEvery(bm25, n=0)
    config = ServerConfig(max_batch=16, max_wait_ms=0, batching=False)
    with serve(create_app(counting, config, kind="bm25")) as url:
        with httpx.stream("POST", f"{url}/retrieve", json={"queries": queries, "topk": 50}) as r:
            assert r.status_code == 200
            next(r.iter_raw())
        deadline = time.monotonic() + 30
        seen = -1
        while counting.calls != seen:  # settles once the server noticed the client left
            assert time.monotonic() < deadline
            seen = counting.calls
            time.sleep(1.0)
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
        assert (
            len(httpx.post(f"{url}/retrieve", json={"queries": queries[:3], "topk": 2}).json()["result"]) == 3
        )
    assert counting.calls < 20  # not all 20 chunks were searched for nobody


def rss_mb(pid: int) -> float | None:
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return None
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@pytest.mark.slow
def test_health_stays_quick_while_a_4096_by_100_request_runs(bm25_index, dev_questions):
    """Issue 55: one request at the limits (4,096 queries x topk 100, about 250 MB of JSON) took
    /health 8.9-17 s and left the server 500 MB larger. Each /health now answers in under 1 s while
    it runs, another client's one-query search in seconds, and the memory goes back afterwards."""
    config = ServerConfig()
    body = {
        "queries": numbered(dev_questions, config.max_queries),
        "topk": config.max_k,
        "return_scores": True,
    }
    with serve_recipe(bm25_index, "--kind", "bm25") as (url, proc):
        rss_before = rss_mb(proc.pid)
        got: dict = {}

        def send() -> None:
            with httpx.stream("POST", f"{url}/retrieve", json=body, timeout=300) as r:
                got["status"], got["size"], got["head"], got["tail"] = r.status_code, 0, b"", b""
                for data in r.iter_bytes():
                    got["head"] = got["head"] or data[:32]
                    got["size"] += len(data)
                    got["tail"] = (got["tail"] + data)[-8:]

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        latencies, searches = [], []
        deadline = time.monotonic() + 300
        while sender.is_alive() and time.monotonic() < deadline:
            start = time.perf_counter()
            assert httpx.get(f"{url}/health", timeout=10).json()["status"] == "ok"
            latencies.append(time.perf_counter() - start)
            if len(latencies) % 20 == 0:  # another client's search waits for a chunk or two, not the lot
                start = time.perf_counter()
                small = httpx.post(
                    f"{url}/retrieve", json={"queries": ["Jaws director"], "topk": 3}, timeout=60
                )
                assert len(small.json()["result"][0]) == 3
                searches.append(time.perf_counter() - start)
            time.sleep(0.1)
        sender.join(timeout=10)
        assert not sender.is_alive(), "the 4,096 x 100 request did not finish in 300 s"
        rss_after = rss_mb(proc.pid)
        for _ in range(20):  # the trim runs once the last chunk is out
            if rss_after is None or rss_after - rss_before < 200:
                break
            time.sleep(0.5)
            rss_after = rss_mb(proc.pid)
    assert got["status"] == 200 and got["size"] > 100e6
    assert got["head"].startswith(b'{"result":[[{"document":{"id":') and got["tail"].endswith(b"]]}")
    assert len(latencies) >= 20, latencies  # polled all along, not once at the end
    assert max(latencies) < 1.0, f"slowest /health {max(latencies):.2f} s of {len(latencies)}"
    assert searches and max(searches) < 10, searches
    if rss_before is not None:
        assert rss_after - rss_before < 200, f"RSS {rss_before:.0f} MB before, {rss_after:.0f} MB after"
