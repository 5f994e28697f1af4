"""HTTP client for a retrieval server speaking the Search-R1 wire format (ours or theirs).

`POST {url}/retrieve {"queries", "topk", "return_scores": true}`; the access tool's
`POST {url}/documents {"ids"}` is ours only. Connection errors,
timeouts and 5xx answers are retried with exponential backoff; 4xx answers are not (the
request itself is wrong) and raise `RetrievalError` with the server's message.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.retrieval.corpus import split_contents

RETRYABLE = (httpx.TransportError,)


class RetrievalError(RuntimeError):
    pass


def _parse(result: list[list[Any]]) -> list[list[Hit]]:
    out = []
    for hits in result:
        row = []
        for item in hits:
            doc, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
            if "title" in doc and "text" in doc:
                title, text = doc["title"], doc["text"]
            else:
                title, text = split_contents(doc.get("contents", ""))
            row.append(Hit(str(doc.get("id", "")), title, text, float(score)))
        out.append(row)
    return out


class RemoteRetriever(Retriever):
    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        index_id: str | None = None,
    ):
        self.url = url.rstrip("/")
        self.timeout, self.max_retries, self.backoff_s, self.max_backoff_s = (
            timeout,
            max_retries,
            backoff_s,
            max_backoff_s,
        )
        self.index_id = index_id or self._health_index_id() or f"remote:{self.url}"
        self._client: httpx.Client | None = None
        self._aclients: dict[int, httpx.AsyncClient] = {}

    def _health_index_id(self) -> str | None:
        try:
            r = httpx.get(f"{self.url}/health", timeout=min(self.timeout, 5.0))
            return r.json().get("index_id") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def _delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * (2**attempt))

    @staticmethod
    def _body(queries: list[str], k: int) -> dict[str, Any]:
        return {"queries": list(queries), "topk": k, "return_scores": True}

    def _handle(self, r: httpx.Response) -> list[list[Hit]] | None:
        """Parsed hits, None to retry (5xx), or raise on a client error."""
        if r.status_code >= 500:
            return None
        if r.status_code >= 400:
            raise RetrievalError(f"{self.url}/retrieve answered {r.status_code}: {r.text[:500]}")
        return _parse(r.json()["result"])

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            try:
                r = self._client.post(f"{self.url}/retrieve", json=self._body(queries, k))
                hits = self._handle(r)
                if hits is not None:
                    return hits
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            except RETRYABLE as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.max_retries:
                time.sleep(self._delay(attempt))
        raise RetrievalError(f"{self.url}/retrieve failed after {self.max_retries + 1} attempts: {last}")

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        # One client per event loop: an httpx.AsyncClient must not cross loops.
        loop_id = id(asyncio.get_running_loop())
        client = self._aclients.get(loop_id)
        if client is None:
            client = self._aclients[loop_id] = httpx.AsyncClient(timeout=self.timeout)
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            try:
                r = await client.post(f"{self.url}/retrieve", json=self._body(queries, k))
                hits = self._handle(r)
                if hits is not None:
                    return hits
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            except RETRYABLE as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt))
        raise RetrievalError(f"{self.url}/retrieve failed after {self.max_retries + 1} attempts: {last}")

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        if not doc_ids:
            return []
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        return self._documents(self._client.post(f"{self.url}/documents", json={"ids": list(doc_ids)}))

    async def adocuments(self, doc_ids: list[str]) -> list[Hit | None]:
        if not doc_ids:
            return []
        loop_id = id(asyncio.get_running_loop())
        client = self._aclients.get(loop_id)
        if client is None:
            client = self._aclients[loop_id] = httpx.AsyncClient(timeout=self.timeout)
        return self._documents(await client.post(f"{self.url}/documents", json={"ids": list(doc_ids)}))

    def _documents(self, r: httpx.Response) -> list[Hit | None]:
        """No retries: a document lookup is one cheap read. A server without `/documents`
        (Search-R1's: 404) or without passages (501) has no document access, as a local retriever
        without passages has none: `NotImplementedError`, not an outage."""
        if r.status_code in (404, 501):
            raise NotImplementedError(f"{self.url} has no document access ({r.status_code}: {r.text[:200]})")
        if r.status_code >= 400:
            raise RetrievalError(f"{self.url}/documents answered {r.status_code}: {r.text[:500]}")
        return [
            None if d is None else Hit(str(d["id"]), d.get("title", ""), d.get("text", ""), 0.0)
            for d in r.json()["documents"]
        ]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
