"""The endpoint pool against three real HTTP model servers on loopback ports: sticky runs,
least-loaded spread, a failing replica taken out and put back by its health check."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest
from fastapi import Request
from fastapi.responses import JSONResponse

from executor_sft.llm.openai_backend import OpenAIChatModel
from executor_sft.llm.routing import merge_replica_counts, replica_counts, routing
from executor_sft.llm.server import BackgroundServer, create_app
from tests.support.doubles import ScriptedChatModel


class Replica:
    """One served model that names itself in every reply; `down` makes it answer 503 to everything,
    `held` keeps its chat replies waiting until cleared."""

    def __init__(self, name: str):
        self.name, self.down, self.held = name, False, threading.Event()
        self.app = create_app(ScriptedChatModel(name="scripted", default=f"from {name}"))

        @self.app.middleware("http")
        async def outage(request: Request, call_next):
            if self.down:
                return JSONResponse({"error": {"message": "replica down"}}, status_code=503)
            while self.held.is_set() and request.url.path.endswith("/chat/completions"):
                await asyncio.sleep(0.01)
            return await call_next(request)

        self.server = BackgroundServer(self.app).start()


@pytest.fixture
def replicas():
    servers = [Replica("a"), Replica("b"), Replica("c")]
    yield servers
    for replica in servers:
        replica.server.stop()


def _model(replicas, **kwargs) -> OpenAIChatModel:
    urls = [r.server.base_url for r in replicas]
    return OpenAIChatModel("scripted", urls, max_retries=3, backoff_base_s=0.01, **kwargs)


async def _ask(model: OpenAIChatModel, key: str | None) -> str:
    with routing(key):
        result = await model.chat([{"role": "user", "content": "hi"}])
    return result.message["content"].removeprefix("from ")


def test_a_run_keeps_its_replica_and_new_runs_go_to_the_least_loaded(replicas):
    model = _model(replicas)
    a = replicas[0]

    async def main():
        await asyncio.gather(*(_ask(model, None) for _ in range(3)))  # a client and a connection per replica
        # One multi-turn run: every turn on the replica its first turn went to.
        turns = [await _ask(model, "episode-1/r0/q0/teacher") for _ in range(4)]
        # Idle replicas take new runs in turn; find a run that went to a.
        on_a = [
            k for k in (f"episode-{i}/r0/q0/teacher" for i in range(2, 8)) if await _ask(model, k) == "a"
        ][0]
        # While a has a request in flight (held there), every new run goes to the idle b and c.
        a.held.set()
        busy = asyncio.create_task(_ask(model, on_a))
        while model.endpoints[0].in_flight == 0:
            await asyncio.sleep(0.01)
        spread = Counter([await _ask(model, f"episode-{i}/r0/q0/teacher") for i in range(10, 20)])
        a.held.clear()
        assert await busy == "a"  # and the held run stayed on a
        await model.aclose()
        return turns, spread

    turns, spread = asyncio.run(main())
    assert len(set(turns)) == 1
    assert spread == {"b": 5, "c": 5}, spread
    assert model.pool.sticky_hits >= 4
    assert all(c["failures"] == 0 for c in model.pool.counts().values())


def test_a_failing_replica_is_taken_out_and_its_health_check_puts_it_back(replicas):
    model = _model(replicas, health_check_s=0.1)
    b = replicas[1]

    async def main():
        key = None
        for i in range(10):  # a run that lands on b
            if await _ask(model, f"run-{i}") == "b":
                key = f"run-{i}"
                break
        assert key is not None
        b.down = True
        moved = await _ask(model, key)  # b answers 503: the run moves and b leaves the pool
        await asyncio.sleep(0.4)  # health checks keep failing: b stays out
        while_down = Counter([await _ask(model, f"new-{i}") for i in range(6)])
        out = model.pool.counts()[b.server.base_url]
        b.down = False
        deadline = time.monotonic() + 5
        while not model.pool.counts()[b.server.base_url]["healthy"]:
            assert time.monotonic() < deadline, "b was never put back"
            await asyncio.sleep(0.05)
        after = Counter([await _ask(model, None) for _ in range(6)])
        await model.aclose()
        return moved, while_down, out, after

    moved, while_down, out, after = asyncio.run(main())
    assert moved != "b" and "b" not in while_down
    assert out["healthy"] is False and out["removed"] == 1 and out["failures"] >= 1
    counts = model.pool.counts()[b.server.base_url]
    assert counts["restored"] == 1 and counts["healthy"] is True
    assert after["b"] >= 2  # back in the round-robin of idle replicas


def test_the_collection_summary_shows_requests_per_replica(replicas):
    from executor_sft.rollout.summary import CollectionStats, render_summary

    model = _model(replicas)

    async def main():
        for i in range(6):
            await _ask(model, f"run-{i}")
        await model.aclose()

    asyncio.run(main())
    counts = replica_counts({"teacher": model, "solo": _model(replicas[:1])})
    assert list(counts) == ["teacher"]  # one replica: nothing to show
    assert [c["requests"] for c in counts["teacher"].values()] == [2, 2, 2]
    text = render_summary({**CollectionStats().to_dict(), "replicas": counts})
    assert "teacher: requests per replica" in text and replicas[2].server.base_url in text


def test_replica_counts_of_several_processes_add_up():
    def counts(requests: int, healthy: bool = True, removed: int = 0) -> dict:
        return {
            "requests": requests,
            "failures": removed,
            "healthy": healthy,
            "removed": removed,
            "restored": 0,
        }

    a, b = "http://a:8000/v1", "http://b:8000/v1"
    merged = merge_replica_counts(
        [
            {"teacher": {a: counts(5), b: counts(3)}},
            {"teacher": {a: counts(2), b: counts(1, healthy=False, removed=1)}, "student": {a: counts(4)}},
        ]
    )
    assert merged == {
        "teacher": {a: counts(7), b: {**counts(4, removed=1), "healthy": False}},
        "student": {a: counts(4)},
    }
    assert list(merged) == ["teacher", "student"] and merge_replica_counts([]) == {}
