"""A retrieval HTTP server speaking the Search-R1 wire format, with micro-batching.

    POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}
      -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}   (return_scores)
      -> {"result": [[{"id", "contents"}, ...], ...]}                          (otherwise)
    POST /documents {"ids": [...]}
      -> {"documents": [{"id", "title", "text"} | null, ...]}   (each passage's whole document)
    GET /health -> {"status": "ok", "index_id", ...}

Concurrent requests are queued and a single worker runs them as one retriever call (up to
`max_batch` queries, waiting at most `max_wait_ms` for more to arrive): one encoder forward
pass over 64 queries costs far less than 64 passes of one. `batching=False` calls the
retriever per request instead.

Search-R1's client sends every active trajectory's query in one request (a training batch of
512 and more) and may send `"topk": null`: the defaults take both (`max_queries` 4096, a null
topk is `default_k`, 3, as Search-R1's server), and a request larger than `max_batch` is split
into `max_batch`-sized retriever calls.

Limits (ServerConfig): a body over `max_body_bytes` gets 413 "Content Too Large" (FastAPI's own
limit, checked as the body arrives, before it is parsed); more than `max_queries` queries, a
query over `max_query_chars` characters or a topk over `max_k` get 422. An empty `queries` list
gets `{"result": []}`, as Search-R1's server answers the `batch_search([])` its training loop
sends on a turn where no rollout searched.

One big request must not stall the others: the event loop's thread only routes. A request is
searched `max_batch` queries at a time, each chunk's hits are turned into JSON on a small pool of
worker threads and streamed out as they are ready (the next chunk is searched meanwhile), so the
server never holds a whole 4,096 x 100 answer (about 250 MB of JSON) and `/health` answers while
it is sent. After a request larger than one chunk, glibc's `malloc_trim` hands the freed memory
back to the system.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from executor_sft.retrieval.base import Hit, Retriever

logger = logging.getLogger(__name__)


@dataclass
class ServerConfig:
    batching: bool = True
    max_batch: int = 128  # queries per retriever call
    max_wait_ms: float = 2.0
    max_queries: int = 4096  # per request: Search-R1's client sends a whole training batch in one
    max_k: int = 100
    default_k: int = 3  # for a request whose topk is null or absent, as Search-R1's server (its --topk)
    max_query_chars: int = 4096  # a search query, not a document
    max_body_bytes: int = 4 << 20  # 4096 queries of ~1 KB (search queries are short); counted as they arrive
    encode_threads: int = 2  # turn hits into JSON off the event loop's thread; more only contend for the GIL


class DocumentsRequest(BaseModel):
    ids: list[str] = Field(min_length=1)


class RetrieveRequest(BaseModel):
    queries: list[str]
    """May be empty: Search-R1's training loop sends `[]` on a turn where no rollout searched."""
    topk: int | None = Field(None, ge=1)
    """None (or absent): the server's `default_k`."""
    return_scores: bool = False


@dataclass
class _Job:
    queries: list[str]
    k: int
    future: asyncio.Future


class MicroBatcher:
    """Collects jobs from concurrent requests and runs them together.

    The worker sleeps until a job arrives, then waits up to `max_wait` for more (woken early once
    `max_batch` queries are pending) and runs everything pending as one retriever call. Jobs that
    arrive while a call runs wait for the next one, so under load each call takes a whole queue.
    """

    def __init__(self, retriever: Retriever, max_batch: int, max_wait_ms: float):
        self.retriever, self.max_batch, self.max_wait = retriever, max_batch, max_wait_ms / 1000
        self.pending: collections.deque[_Job] = collections.deque()
        self.pending_queries = 0
        self.calls = 0
        self.batched_queries = 0
        self._arrived = asyncio.Event()  # at least one job is pending
        self._full = asyncio.Event()  # max_batch queries are pending
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Hits per query; a request larger than `max_batch` goes in as `max_batch`-sized jobs,
        so one retriever call never holds more than `max_batch` queries (an encoder's memory)."""
        if len(queries) > self.max_batch:
            chunks = [queries[i : i + self.max_batch] for i in range(0, len(queries), self.max_batch)]
            parts = await asyncio.gather(*(self._submit(chunk, k) for chunk in chunks))
            return [hits for part in parts for hits in part]
        return await self._submit(queries, k)

    async def _submit(self, queries: list[str], k: int) -> list[list[Hit]]:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(_Job(queries, k, fut))
        self.pending_queries += len(queries)
        self._arrived.set()
        if self.pending_queries >= self.max_batch:
            self._full.set()
        return await fut

    def _take(self) -> list[_Job]:
        """Pending jobs up to max_batch queries (always at least one job, however large)."""
        jobs = [self.pending.popleft()]
        n = len(jobs[0].queries)
        while self.pending and n + len(self.pending[0].queries) <= self.max_batch:
            jobs.append(self.pending.popleft())
            n += len(jobs[-1].queries)
        self.pending_queries -= n
        if not self.pending:
            self._arrived.clear()
        if self.pending_queries < self.max_batch:
            self._full.clear()
        return jobs

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            if self.pending_queries < self.max_batch and self.max_wait > 0:
                # Waiting on an Event (not on queue.get()) cannot lose a job when it times out.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.max_wait)
            await self._execute(self._take())

    async def _execute(self, jobs: list[_Job]) -> None:
        # Hits come sorted, so each job's top-k is the prefix of the batch's top-max(k).
        k = max(j.k for j in jobs)
        queries = [q for j in jobs for q in j.queries]
        self.calls += 1
        self.batched_queries += len(queries)
        try:
            results = await self.retriever.asearch(queries, k)
        except Exception as e:  # every waiting request learns of the failure
            for j in jobs:
                if not j.future.done():
                    j.future.set_exception(e)
            return
        i = 0
        for j in jobs:
            if not j.future.done():
                j.future.set_result([hits[: j.k] for hits in results[i : i + len(j.queries)]])
            i += len(j.queries)


def _doc(h: Hit) -> dict:
    return {"id": h.doc_id, "contents": h.contents}


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""JSON as Starlette's JSONResponse writes it (compact, UTF-8, no NaN)."""


def _encode_rows(results: list[list[Hit]], return_scores: bool) -> bytes:
    """The `result` rows of `results`, comma-separated without the list's brackets, so that the
    chunks of one request join into one list. Runs on a worker thread; each query's row is
    encoded on its own because the C encoder keeps the GIL for a whole call, which the event
    loop's thread would wait out."""
    if return_scores:
        rows = ([{"document": _doc(h), "score": h.score} for h in hits] for hits in results)
    else:
        rows = ([_doc(h) for h in hits] for hits in results)
    return ",".join(_ENCODER.encode(row) for row in rows).encode("utf-8")


def _encode_documents(docs: list[Hit | None]) -> bytes:
    return _ENCODER.encode(
        {
            "documents": [
                None if d is None else {"id": d.doc_id, "title": d.title, "text": d.text} for d in docs
            ]
        }
    ).encode("utf-8")


Search = Callable[[list[str], int], Awaitable[list[list[Hit]]]]


async def _encoded_chunks(
    search: Search,
    encode: Callable[[list[list[Hit]]], Awaitable[bytes]],
    queries: list[str],
    k: int,
    size: int,
) -> AsyncIterator[bytes]:
    """Each `size` queries' rows as JSON, in order; the next chunk is searched while this one is
    encoded and sent, so at most two chunks' hits are alive at once."""
    upcoming = asyncio.ensure_future(search(queries[:size], k))
    try:
        for start in range(size, len(queries) + size, size):
            hits = await upcoming
            rest = queries[start : start + size]
            upcoming = asyncio.ensure_future(search(rest, k)) if rest else None
            data = await encode(hits)
            del hits
            yield data
    finally:
        if upcoming is not None:  # the client left mid-answer
            upcoming.cancel()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, which returns freed heap memory to the system; None elsewhere."""
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library this process already runs on
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows)
        return None


def release_memory() -> None:
    """Hand memory freed by a big answer back to the system (CPython keeps large freed blocks in
    glibc's heap, so without this the server's RSS stays at its peak)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _over_limit(req: RetrieveRequest, config: ServerConfig) -> str | None:
    """The first server limit `req` breaks, said for the client; None when it keeps them all."""
    if len(req.queries) > config.max_queries:
        return f"queries: {len(req.queries)} queries exceed the limit of {config.max_queries} per request"
    if req.topk > config.max_k:
        return f"topk: {req.topk} exceeds the limit of {config.max_k}"
    for i, q in enumerate(req.queries):
        if len(q) > config.max_query_chars:
            return f"queries.{i}: {len(q)} characters exceed the limit of {config.max_query_chars} per query"
    return None


def create_app(retriever: Retriever, config: ServerConfig | None = None, kind: str | None = None) -> FastAPI:
    """The retrieval app over `retriever` (`kind` is reported by /health)."""
    config = config or ServerConfig()
    batcher = MicroBatcher(retriever, config.max_batch, config.max_wait_ms) if config.batching else None
    pool = ThreadPoolExecutor(config.encode_threads, thread_name_prefix="retrieval-encode")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if batcher:
            batcher.start()
        yield
        if batcher:
            await batcher.stop()
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="executor_sft retrieval", lifespan=lifespan, max_body_size=config.max_body_bytes)
    app.state.batcher = batcher
    app.state.requests = 0
    app.state.retriever_calls = 0  # without batching; the batcher counts its own
    app.add_exception_handler(RequestValidationError, _readable_422)
    _add_health(app, retriever, config, batcher, kind)
    _add_retrieve(app, retriever, config, batcher, pool)
    _add_documents(app, retriever, config, pool)
    return app


async def _readable_422(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A validation failure as one `field: problem` line per problem, not pydantic's nested JSON."""
    problems = [
        f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": "; ".join(problems)})


def _add_health(
    app: FastAPI, retriever: Retriever, config: ServerConfig, batcher: MicroBatcher | None, kind: str | None
) -> None:
    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "index_id": retriever.index_id,
            "kind": kind,
            "batching": config.batching,
            "requests": app.state.requests,
            "retriever_calls": batcher.calls if batcher else app.state.retriever_calls,
        }


def _add_retrieve(
    app: FastAPI,
    retriever: Retriever,
    config: ServerConfig,
    batcher: MicroBatcher | None,
    pool: ThreadPoolExecutor,
) -> None:
    async def unbatched(queries: list[str], k: int) -> list[list[Hit]]:
        app.state.retriever_calls += 1
        return await retriever.asearch(queries, k)

    search: Search = batcher.submit if batcher else unbatched

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest):
        if req.topk is None:
            req.topk = config.default_k
        if problem := _over_limit(req, config):
            return JSONResponse(status_code=422, content={"detail": problem})
        app.state.requests += 1
        if not req.queries:
            return JSONResponse({"result": []})
        loop = asyncio.get_running_loop()
        encode = functools.partial(loop.run_in_executor, pool, _encode_rows)
        chunks = _encoded_chunks(
            search, lambda hits: encode(hits, req.return_scores), req.queries, req.topk, config.max_batch
        )
        first = await anext(chunks)  # a failing search still gets its 500 before any byte is sent
        if len(req.queries) <= config.max_batch:
            await chunks.aclose()
            return Response(b'{"result":[' + first + b"]}", media_type="application/json")

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b'{"result":[' + first
                async for data in chunks:
                    yield b"," + data
                yield b"]}"
            finally:
                with anyio.CancelScope(shield=True):  # also when the client left: stop the next search
                    await chunks.aclose()
                loop.run_in_executor(pool, release_memory)

        return StreamingResponse(body(), media_type="application/json")


def _add_documents(
    app: FastAPI, retriever: Retriever, config: ServerConfig, pool: ThreadPoolExecutor
) -> None:
    @app.post("/documents")
    async def documents(req: DocumentsRequest):
        if len(req.ids) > config.max_queries:
            detail = f"ids: {len(req.ids)} ids exceed the limit of {config.max_queries} per request"
            return JSONResponse(status_code=422, content={"detail": detail})
        try:
            docs = await retriever.adocuments(req.ids)
        except NotImplementedError as e:
            return JSONResponse(status_code=501, content={"detail": str(e)})
        body = await asyncio.get_running_loop().run_in_executor(pool, _encode_documents, docs)
        return Response(body, media_type="application/json")
