"""Requests over several replicas of one model: sticky, least-loaded, with health checks.

A multi-turn executor run re-sends its growing prefix every turn, so sending each turn to the
replica that served the last one lets that replica's prefix cache answer it (verl's AgentLoop
routes this way; SkyRL measured up to 1.4x throughput on long multi-turn tasks). The agents
name the unit that should stay on one replica with `routing(key)`: the pipeline names each
episode (backbone and answerer calls) and each executor run inside it. A key's first request
goes to the healthy replica with the fewest requests in flight (ties round-robin) and the key
stays there while that replica is healthy.

A replica that refuses a connection or answers 5xx is taken out at once; with `health_check_s`
set, a background check (GET `<server>/health`, as vLLM and `executor_sft.llm.server` answer)
puts it back when it answers 200 again, and takes out a replica that stops answering. Without
checks a replica that failed is avoided for `down_cooldown_s`, then tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx

logger = logging.getLogger(__name__)

MAX_STICKY_KEYS = 65536
"""Keys remembered per pool (least recently used dropped): far more runs than are ever in flight."""

_ROUTE_KEY: ContextVar[str | None] = ContextVar("executor_sft_route_key", default=None)


@contextlib.contextmanager
def routing(key: str | None) -> Iterator[None]:
    """Requests made inside this block (and the tasks it starts) stay on one replica per `key`."""
    token = _ROUTE_KEY.set(key)
    try:
        yield
    finally:
        _ROUTE_KEY.reset(token)


def route_key() -> str | None:
    return _ROUTE_KEY.get()


def health_url(base_url: str) -> str:
    """`http://host:port/v1` -> `http://host:port/health` (the server root, where vLLM answers it)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/health"


@dataclass
class Replica:
    base_url: str
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    healthy: bool = True
    down_until: float = 0.0
    removed: int = 0
    """Times it was taken out (a failed request or health check)."""
    restored: int = 0
    """Times a health check put it back."""

    def counts(self) -> dict[str, Any]:
        """Its counts as the summary shows them (`SUMMED` counters and `healthy`)."""
        return {
            "requests": self.requests,
            "failures": self.failures,
            "healthy": self.healthy,
            "removed": self.removed,
            "restored": self.restored,
        }


SUMMED = ("requests", "failures", "removed", "restored")
"""The counters of `Replica.counts` that add up across processes (`merge_replica_counts`)."""


class EndpointPool:
    """The replicas of one model and which one each sticky key is on."""

    def __init__(self, base_urls: list[str], *, down_cooldown_s: float = 5.0, health_check_s: float = 0.0):
        if not base_urls:
            raise ValueError("EndpointPool: base_urls is empty")
        self.replicas = [Replica(u.rstrip("/")) for u in base_urls]
        self.down_cooldown_s = down_cooldown_s
        self.health_check_s = health_check_s
        self.sticky: OrderedDict[str, Replica] = OrderedDict()
        self.sticky_hits = 0
        self._rr = itertools.count()
        self._checkers: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}

    def _usable(self, replica: Replica, now: float) -> bool:
        if self.health_check_s:
            return replica.healthy
        return replica.down_until <= now

    def pick(self, avoid: set[str] = frozenset(), key: str | None = None) -> Replica:
        """The replica for the next request: the key's own if usable, else the least loaded."""
        self._start_checks()
        now = time.monotonic()
        if key is not None:
            own = self.sticky.get(key)
            if own is not None and own.base_url not in avoid and self._usable(own, now):
                self.sticky.move_to_end(key)
                self.sticky_hits += 1
                return own
        pools = (
            [r for r in self.replicas if r.base_url not in avoid and self._usable(r, now)],
            [r for r in self.replicas if self._usable(r, now)],
            [r for r in self.replicas if r.base_url not in avoid],
            self.replicas,
        )
        pool = next(p for p in pools if p)
        least = min(r.in_flight for r in pool)
        tied = [r for r in pool if r.in_flight == least]
        chosen = tied[next(self._rr) % len(tied)]
        if key is not None:
            self.sticky[key] = chosen
            self.sticky.move_to_end(key)
            while len(self.sticky) > MAX_STICKY_KEYS:
                self.sticky.popitem(last=False)
        return chosen

    def mark_down(self, replica: Replica) -> None:
        """A connection refused or a 5xx: out until its cooldown ends or a health check says it is back."""
        replica.down_until = time.monotonic() + self.down_cooldown_s
        if replica.healthy:
            replica.healthy = False
            replica.removed += 1
            logger.warning("replica %s taken out of the pool", replica.base_url)
        if not self.health_check_s:
            replica.healthy = True  # without checks, the cooldown alone brings it back

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per replica: requests, failures, whether it is in the pool, times removed and restored."""
        return {r.base_url: r.counts() for r in self.replicas}

    # -- health checks ------------------------------------------------------------------------
    def _start_checks(self) -> None:
        if not self.health_check_s:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._checkers.get(loop)
        if task is None or task.done():
            self._checkers = {lp: t for lp, t in self._checkers.items() if not t.done()}
            self._checkers[loop] = loop.create_task(self._check_forever(), name="endpoint-health")

    async def check_once(self, client: httpx.AsyncClient) -> None:
        """Ask every replica's /health once; update who is in the pool."""

        async def check(replica: Replica) -> None:
            try:
                ok = (await client.get(health_url(replica.base_url))).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok and not replica.healthy:
                replica.healthy, replica.down_until = True, 0.0
                replica.restored += 1
                logger.warning("replica %s is back in the pool", replica.base_url)
            elif not ok and replica.healthy:
                replica.healthy = False
                replica.removed += 1
                logger.warning("replica %s failed its health check; taken out of the pool", replica.base_url)

        await asyncio.gather(*(check(r) for r in self.replicas))

    async def _check_forever(self) -> None:
        timeout = httpx.Timeout(max(0.5, min(self.health_check_s, 5.0)))
        async with httpx.AsyncClient(timeout=timeout) as client:
            while True:
                await self.check_once(client)
                await asyncio.sleep(self.health_check_s)

    async def aclose(self) -> None:
        task = self._checkers.pop(asyncio.get_running_loop(), None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def replica_counts(models: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Role -> replica URL -> counts, for every model served by more than one replica (a wrapper
    is looked through by its `inner`)."""
    found = {}
    for role, model in models.items():
        seen = 0
        while model is not None and not isinstance(getattr(model, "pool", None), EndpointPool) and seen < 8:
            model, seen = getattr(model, "inner", None), seen + 1
        pool = getattr(model, "pool", None)
        if isinstance(pool, EndpointPool) and len(pool.replicas) > 1:
            found[role] = pool.counts()
    return found


def merge_replica_counts(
    snapshots: Iterable[Mapping[str, Mapping[str, Mapping[str, Any]]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Several processes' `replica_counts` (Ray actors, each routing over pools of its own) as one:
    the counters summed per role and replica, and a replica `healthy` only if every process that
    reported it found it healthy. Roles and replicas keep the order they are first seen in."""
    merged: dict[str, dict[str, dict[str, Any]]] = {}
    for snapshot in snapshots:
        for role, replicas in snapshot.items():
            into = merged.setdefault(role, {})
            for url, counts in replicas.items():
                if url not in into:
                    into[url] = dict(counts)
                    continue
                total = into[url]
                for name in SUMMED:
                    total[name] += counts[name]
                total["healthy"] = total["healthy"] and counts["healthy"]
    return merged
