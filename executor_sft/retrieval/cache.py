"""A retrieval cache keyed by (index_id, query, k): in-memory LRU plus an optional sqlite file.

Rollouts repeat sub-queries a lot (teacher, student and counterfactual runs search the same
things); the sqlite layer makes a resumed or repeated run skip retrieval it already did.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from executor_sft.retrieval.base import Hit, Retriever

Key = tuple[str, str, int]


def _dump(hits: list[Hit]) -> str:
    return json.dumps([[h.doc_id, h.title, h.text, h.score] for h in hits], ensure_ascii=False)


def _load(blob: str) -> list[Hit]:
    return [Hit(d, t, x, float(s)) for d, t, x, s in json.loads(blob)]


class CachedRetriever(Retriever):
    def __init__(self, retriever: Retriever, maxsize: int = 100_000, path: str | Path | None = None):
        self.retriever, self.maxsize = retriever, maxsize
        self.index_id = retriever.index_id
        self._lru: OrderedDict[Key, list[Hit]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
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

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        keys, found, missing = self._split(list(queries), k)
        fetched = self.retriever.search(missing, k) if missing else []
        return self._merge(queries, k, keys, found, missing, fetched)

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        keys, found, missing = self._split(list(queries), k)
        fetched = await self.retriever.asearch(missing, k) if missing else []
        return self._merge(queries, k, keys, found, missing, fetched)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
