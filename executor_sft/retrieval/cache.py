"""A retrieval cache keyed by (index_id, query, k): in-memory LRU plus an optional sqlite file.

Rollouts repeat sub-queries a lot (teacher, student and counterfactual runs search the same
things); the sqlite layer makes a resumed or repeated run skip retrieval it already did.

On the async path, a query already being retrieved is not retrieved again: later callers wait
for the same result (teacher and student send the same first query at the same moment). For
retrievers whose per-query results do not depend on the batch (`batch_invariant = True`, the
BM25 backends), the misses of concurrent callers are also gathered into one batch call while
the previous batch runs, so a busy event loop makes one thread hop per batch, not per search.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from executor_sft.retrieval.base import Hit, Retriever

Key = tuple[str, str, int]


def _dump(hits: list[Hit]) -> str:
    return json.dumps([[h.doc_id, h.title, h.text, h.score] for h in hits], ensure_ascii=False)


def _load(blob: str) -> list[Hit]:
    return [Hit(d, t, x, float(s)) for d, t, x, s in json.loads(blob)]


@dataclass
class _LoopState:
    """Per event loop: queries being retrieved, and misses waiting for the next batch."""

    inflight: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)
    queued: list[tuple[str, int, asyncio.Future]] = field(default_factory=list)
    drain: asyncio.Task | None = None
    """The task running batches; new misses queue behind the batch it is running."""
    tasks: set[asyncio.Task] = field(default_factory=set)


class CachedRetriever(Retriever):
    def __init__(self, retriever: Retriever, maxsize: int = 100_000, path: str | Path | None = None):
        self.retriever, self.maxsize = retriever, maxsize
        self.index_id = retriever.index_id
        self._lru: OrderedDict[Key, list[Hit]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self._db: sqlite3.Connection | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS hits (index_id TEXT, query TEXT, k INTEGER, hits TEXT, "
                "PRIMARY KEY (index_id, query, k))"
            )

    def _get(self, key: Key) -> list[Hit] | None:
        with self._lock:
            if key in self._lru:
                self._lru.move_to_end(key)
                return self._lru[key]
            if self._db is not None:
                row = self._db.execute(
                    "SELECT hits FROM hits WHERE index_id=? AND query=? AND k=?", key
                ).fetchone()
                if row is not None:
                    hits = _load(row[0])
                    self._remember(key, hits)
                    return hits
        return None

    def _remember(self, key: Key, hits: list[Hit]) -> None:
        self._lru[key] = hits
        self._lru.move_to_end(key)
        while len(self._lru) > self.maxsize:
            self._lru.popitem(last=False)

    def _put(self, items: list[tuple[Key, list[Hit]]]) -> None:
        with self._lock:
            for key, hits in items:
                self._remember(key, hits)
            if self._db is not None and items:
                self._db.executemany(
                    "INSERT OR REPLACE INTO hits VALUES (?, ?, ?, ?)", [(*key, _dump(h)) for key, h in items]
                )

    def _split(self, queries: list[str], k: int):
        keys = [(self.index_id, q, k) for q in queries]
        found = [self._get(key) for key in keys]
        missing = sorted({q for q, f in zip(queries, found, strict=True) if f is None})
        self.hits += sum(f is not None for f in found)
        self.misses += len(queries) - sum(f is not None for f in found)
        return keys, found, missing

    def _merge(self, queries, k, keys, found, missing, fetched):
        new = dict(zip(missing, fetched, strict=True))
        self._put([((self.index_id, q, k), hits) for q, hits in new.items()])
        return [f if f is not None else new[q] for q, f in zip(queries, found, strict=True)]

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        return self.retriever.documents(doc_ids)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        keys, found, missing = self._split(list(queries), k)
        fetched = self.retriever.search(missing, k) if missing else []
        return self._merge(queries, k, keys, found, missing, fetched)

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        queries = list(queries)
        _, found, missing = self._split(queries, k)
        if not missing:
            return found
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopState()
        waits, new = [], []
        for q in missing:
            future = state.inflight.get((q, k))
            if future is None:
                future = state.inflight[(q, k)] = loop.create_future()
                new.append((q, k, future))
            waits.append(future)
        if new and getattr(self.retriever, "batch_invariant", False):
            state.queued.extend(new)
            if state.drain is None:
                state.drain = loop.create_task(self._drain(state))
        elif new:
            task = loop.create_task(self._fetch(state, new))
            state.tasks.add(task)
            task.add_done_callback(state.tasks.discard)
        # shield: one caller being cancelled must not cancel a result others wait for.
        fetched = dict(zip(missing, [await asyncio.shield(f) for f in waits], strict=True))
        return [f if f is not None else fetched[q] for q, f in zip(queries, found, strict=True)]

    async def _drain(self, state: _LoopState) -> None:
        """Retrieve queued misses one batch (per k) at a time until none are left."""
        try:
            while state.queued:
                batch, state.queued = state.queued, []
                by_k: dict[int, list[tuple[str, int, asyncio.Future]]] = {}
                for item in batch:
                    by_k.setdefault(item[1], []).append(item)
                await asyncio.gather(*(self._fetch(state, items) for items in by_k.values()))
        finally:
            state.drain = None
            for q, k, future in state.queued:  # only when cancelled (event loop shutting down)
                state.inflight.pop((q, k), None)
                future.cancel()
            state.queued = []

    async def _fetch(self, state: _LoopState, items: list[tuple[str, int, asyncio.Future]]) -> None:
        """Retrieve `items` (one k) with one call; cache, then hand the results to every waiter."""
        k = items[0][1]
        try:
            results = await self.retriever.asearch([q for q, _, _ in items], k)
        except BaseException as exc:
            for q, _, future in items:
                state.inflight.pop((q, k), None)
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                    future.exception()  # marked retrieved: its waiters may all have been cancelled
                else:
                    future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        self._put([((self.index_id, q, k), hits) for (q, _, _), hits in zip(items, results, strict=True)])
        for (q, _, future), hits in zip(items, results, strict=True):
            state.inflight.pop((q, k), None)
            future.set_result(hits)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
