"""A request cache for greedy chat calls, consulted by `agents.calls.call_model`, persisted as append-only JSONL.

While a `RequestCache` is in use (`with cache.in_use():`, which the engines enter around their
episodes), every call `call_model` makes to a model the cache covers (`cover`) goes through it:
a temperature-0 request it has seen before is answered from the cache, every other is sent.
Being consulted where every recorded call passes, rather than wrapping each model, it puts no
frame of its own between the agents and the backend. The key is a SHA-256 of the full request:
the model's identity (its role's `ChatModelConfig.identity()`, by default the model's `name`),
the messages, the tools and the
effective sampling settings (the call's `SamplingParams`, or the model's own defaults when the
call passes none), every field included: `seed`, `top_p`, `max_tokens`, `stop`,
`enable_thinking` and `extra_body`. So changing any part of a request misses.

- Only greedy requests are cached (effective `temperature == 0`); a sampled request is
  always sent, since a second sample is meant to differ.
- `seed` is part of the key like every other field: at temperature 0 it should not change the
  output, but a request is cached as sent, never normalised.
- `n` / `best_of` (which only an `extra_body` can set: the protocol returns one message) other
  than 1 bypass the cache: such a request asks for alternatives, not a replay.
- A request asking for log-probabilities (`SamplingParams.logprobs`) bypasses it too: the cache
  does not keep them.
- Transport failures (`ChatError`) are not cached, so a rerun retries them.
- A hit returns the stored result as it was first returned (message, usage, latency, model,
  finish reason, sampled token ids where they were returned), so a resumed collection writes the same records as an uninterrupted one
  and its token accounting is unchanged; `hits` / `misses` count what the cache saved.
- Identical requests in flight at once are sent once; the others await that answer.
- The judge's calls do not pass through `call_model`: it caches its own verdicts.

`RequestCache(path)` is the store: it loads every line on open (a torn last line, left by a
killed writer, and any damaged line are skipped with a warning, like the judge cache), keeps
the entries in memory and appends each new answer as one line with one `write` on a file
opened in append mode. No lock: on a local file system an append-mode write of one line is
not interleaved with another process's, so workers of one collection can share the file;
two processes that answer the same request both append it, and the later line wins on load
(the answers are equivalent greedy outputs).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from executor_sft.files import iter_records
from executor_sft.llm.base import ChatModel, ChatResult, SamplingParams
from executor_sft.schema import Message, SampledTokens, TokenUsage

logger = logging.getLogger(__name__)

_IN_USE: ContextVar[RequestCache | None] = ContextVar("executor_sft_request_cache", default=None)

CACHE_SUFFIX = ".llm_cache.jsonl"
"""`<rollouts stem>.llm_cache.jsonl`: the cache file beside a collection's rollouts."""


def request_key(
    model_key: str, messages: list[Message], tools: list[dict[str, Any]] | None, sampling: SamplingParams
) -> str:
    """SHA-256 of the canonical JSON of the whole request (model, messages, tools, sampling)."""
    payload = {
        "model": model_key,
        "messages": messages,
        "tools": tools,
        "sampling": dataclasses.asdict(sampling),
    }
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cacheable(sampling: SamplingParams) -> bool:
    """Greedy, asking for one completion and no log-probabilities (which the cache does not keep):
    the requests this cache answers."""
    extra = sampling.extra_body or {}
    return (
        sampling.temperature == 0
        and sampling.logprobs is None
        and all(extra.get(k, 1) in (1, None) for k in ("n", "best_of"))
    )


class RequestCache:
    """Append-only JSONL store of chat results by request key (see the module docstring)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.entries: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self.misses = 0
        self._model_keys: dict[int, tuple[ChatModel, str]] = {}
        self._inflight: dict[str, asyncio.Event] = {}
        if self.path is not None and self.path.exists():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        for i, row in iter_records(self.path, skip_torn_tail=True, skip_bad_lines=True):
            key, result = row.get("key"), row.get("result")
            if isinstance(key, str) and isinstance(result, dict) and isinstance(result.get("message"), dict):
                self.entries[key] = result
            else:
                logger.warning("%s:%d: skipping an unreadable request cache line", self.path, i)

    def cover(
        self,
        models: Mapping[str, ChatModel],
        *,
        skip_roles: tuple[str, ...] = (),
        model_keys: Mapping[str, str] | None = None,
    ) -> RequestCache:
        """Answer the calls to these models (but `skip_roles`'), each keyed by its role's entry in
        `model_keys` (default: the model's `name`); a model shared by roles is keyed by the first."""
        for role, model in models.items():
            if role not in skip_roles and id(model) not in self._model_keys:
                key = (model_keys or {}).get(role) or str(getattr(model, "name", "unknown"))
                self._model_keys[id(model)] = (model, key)
        return self

    @contextlib.contextmanager
    def in_use(self) -> Iterator[RequestCache]:
        """`call_model` consults this cache inside the block (and in the tasks it starts)."""
        token = _IN_USE.set(self)
        try:
            yield self
        finally:
            _IN_USE.reset(token)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def get(self, key: str) -> ChatResult | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        return ChatResult(
            message=copy.deepcopy(entry["message"]),
            usage=TokenUsage.model_validate(entry.get("usage") or {}),
            latency_s=float(entry.get("latency_s") or 0.0),
            model=str(entry.get("model") or ""),
            finish_reason=entry.get("finish_reason"),
            sampled_tokens=SampledTokens.model_validate(entry["sampled_tokens"])
            if entry.get("sampled_tokens")
            else None,
        )

    def put(self, key: str, result: ChatResult, model_key: str) -> None:
        entry = {
            "message": copy.deepcopy(result.message),
            "usage": result.usage.model_dump(mode="json"),
            "latency_s": result.latency_s,
            "model": result.model,
            "finish_reason": result.finish_reason,
        }
        if result.sampled_tokens is not None:
            entry["sampled_tokens"] = result.sampled_tokens.model_dump(mode="json")
        self.entries[key] = entry
        if self.path is None:
            return
        line = json.dumps({"key": key, "model_key": model_key, "result": entry}, ensure_ascii=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._append(line.encode("utf-8"))

    def _append(self, data: bytes) -> None:
        assert self.path is not None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            # A torn tail left by a killed writer would swallow this line: start on a fresh line.
            size = os.fstat(fd).st_size
            if size:
                with self.path.open("rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        data = b"\n" + data
            os.write(fd, data)
        finally:
            os.close(fd)


class CachedRequest:
    """One request to a covered model while a cache is in use: `replayed()` answers it from the
    cache (waiting first for an identical request in flight), `keep(result)` stores what the
    model answered, `release()` (always, after the call) lets the requests waiting on it go on."""

    def __init__(self, cache: RequestCache, key: str, model_key: str):
        self.cache, self.key, self.model_key = cache, key, model_key
        self._sending: asyncio.Event | None = None

    async def replayed(self) -> ChatResult | None:
        """The stored answer, or None: then the caller sends the request."""
        cache = self.cache
        cached = cache.get(self.key)
        if cached is None:
            pending = cache._inflight.get(self.key)
            if pending is None:  # the first to ask: its answer is kept, the others wait for it
                self._sending = cache._inflight[self.key] = asyncio.Event()
                cache.misses += 1
                return None
            await pending.wait()
            cached = cache.get(self.key)
            if cached is None:  # the first sender failed: send it again, unkept
                return None
        cache.hits += 1
        return cached

    def keep(self, result: ChatResult) -> None:
        """Store the model's answer when this request was the first to ask."""
        if self._sending is not None:
            self.cache.put(self.key, result, self.model_key)

    def release(self) -> None:
        if self._sending is not None:
            del self.cache._inflight[self.key]
            self._sending.set()
            self._sending = None


def cached_request(
    model: ChatModel,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    sampling: SamplingParams | None,
) -> CachedRequest | None:
    """This request's place in the cache in use, or None: no cache in use, a model it does not
    cover, or a request it does not answer (`cacheable`)."""
    cache = _IN_USE.get()
    covered = cache._model_keys.get(id(model)) if cache is not None else None
    if covered is None:
        return None
    effective = sampling or getattr(model, "sampling", None) or SamplingParams()
    if not cacheable(effective):
        return None
    model_key = covered[1]
    return CachedRequest(cache, request_key(model_key, messages, tools, effective), model_key)
