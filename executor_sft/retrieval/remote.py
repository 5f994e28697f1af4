"""HTTP client for a retrieval server speaking the Search-R1 wire format (ours or theirs).

`POST {url}/retrieve {"queries", "topk", "return_scores": true}`; the access tool's
`POST {url}/documents {"ids"}` is ours only. Failures are classified as everywhere else
(`executor_sft.failures`): connection errors, timeouts, 5xx/429 answers and 200s that are not
a result are retried with exponential backoff, then raise `RetrievalError` (infrastructure: the
episode is retried on resume), as does any other 4xx but 400/413/414/422 at once (a wrong URL);
those are this request's own fault, are not retried, and raise `RetrievalRefused` with the
server's message (the tool records it as the run's finish).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from executor_sft.failures import TRANSPORT_ERRORS, InfrastructureError, RequestRefused, status_kind
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.retrieval.corpus import split_contents
from executor_sft.urls import redact


class RetrievalError(InfrastructureError):
    """The retrieval server failed past its retries (down, timing out, answering 5xx or garbage)."""


class RetrievalRefused(RequestRefused):
    """The retrieval server refused this request (a 4xx such as 413): the episode's own outcome."""


class _Retry(Exception):
    """An answer worth another attempt (a 5xx or 429, or a 200 that is not the expected result);
    its text is the reason the final `RetrievalError` gives."""


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
        self.index_id = index_id or self._health_index_id() or f"remote:{redact(self.url)}"
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

    def _handle(self, r: httpx.Response) -> list[list[Hit]]:
        """Parsed hits; raises `_Retry` to try again, or for a refused request."""
        self._check(r, "retrieve")
        try:
            return _parse(r.json()["result"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _Retry(f"HTTP 200 that is not a result: {type(exc).__name__}: {r.text[:200]!r}") from None

    def _check(self, r: httpx.Response, endpoint: str) -> None:
        """Raises `_Retry` for an answer worth another attempt, and the caller's error for a refused
        request or a wrong set-up; returns for a success, so both POST loops only catch."""
        kind = status_kind(r.status_code)
        detail = f"{redact(self.url)}/{endpoint} answered {r.status_code}: {r.text[:500]}"
        if kind == "outcome":
            raise RetrievalRefused(detail)
        if kind == "setup":
            raise RetrievalError(detail)
        if kind == "retry":
            raise _Retry(f"HTTP {r.status_code}: {r.text[:200]}")

    def _sync_client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        return self._client

    def _async_client(self) -> httpx.AsyncClient:
        # One client per event loop: an httpx.AsyncClient must not cross loops.
        loop_id = id(asyncio.get_running_loop())
        client = self._aclients.get(loop_id)
        if client is None:
            client = self._aclients[loop_id] = httpx.AsyncClient(timeout=self.timeout)
        return client

    def _failed(self, endpoint: str, last: str) -> RetrievalError:
        return RetrievalError(
            f"{redact(self.url)}/{endpoint} failed after {self.max_retries + 1} attempts: {last}"
        )

    def _post(self, endpoint: str, body: dict[str, Any], read):
        """POST with retries on infrastructure failures; `read(response)` -> value, or raises `_Retry`."""
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            try:
                return read(self._sync_client().post(f"{self.url}/{endpoint}", json=body))
            except _Retry as e:
                last = str(e)
            except TRANSPORT_ERRORS as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.max_retries:
                time.sleep(self._delay(attempt))
        raise self._failed(endpoint, last)

    async def _apost(self, endpoint: str, body: dict[str, Any], read):
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            try:
                return read(await self._async_client().post(f"{self.url}/{endpoint}", json=body))
            except _Retry as e:
                last = str(e)
            except TRANSPORT_ERRORS as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt))
        raise self._failed(endpoint, last)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        return self._post("retrieve", self._body(queries, k), self._handle)

    async def asearch(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        return await self._apost("retrieve", self._body(queries, k), self._handle)

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        if not doc_ids:
            return []
        return self._post("documents", {"ids": list(doc_ids)}, self._documents)

    async def adocuments(self, doc_ids: list[str]) -> list[Hit | None]:
        if not doc_ids:
            return []
        return await self._apost("documents", {"ids": list(doc_ids)}, self._documents)

    def _documents(self, r: httpx.Response) -> list[Hit | None]:
        """A server without `/documents` (Search-R1's: 404) or without passages (501) has no
        document access, as a local retriever without passages has none: `NotImplementedError`,
        not an outage."""
        if r.status_code in (404, 501):
            raise NotImplementedError(
                f"{redact(self.url)} has no document access ({r.status_code}: {r.text[:200]})"
            )
        self._check(r, "documents")
        try:
            return [
                None if d is None else Hit(str(d["id"]), d.get("title", ""), d.get("text", ""), 0.0)
                for d in r.json()["documents"]
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _Retry(f"HTTP 200 that is not documents: {type(exc).__name__}: {r.text[:200]!r}") from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
