"""A request cache for greedy chat calls: a `ChatModel` wrapper persisted as append-only JSONL.

`CachedChatModel(inner, cache)` answers a temperature-0 request it has seen before from the
cache and sends every other request to `inner`. The key is a SHA-256 of the full request:
the model's identity (`model_key`: a config's `ChatModelConfig.identity()`, by default the model's
`name`), the messages, the tools and the
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
import copy
import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from executor_sft.files import iter_records
from executor_sft.llm.base import ChatModel, ChatResult, SamplingParams
from executor_sft.schema import Message, SampledTokens, TokenUsage

logger = logging.getLogger(__name__)

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


class CachedChatModel:
    """A `ChatModel` that answers repeated greedy requests from a `RequestCache`.

    Every other attribute (`name`, `sampling`, `tokenizer`, `aclose`, ...) is the inner model's.
    """

    def __init__(self, inner: ChatModel, cache: RequestCache, model_key: str | None = None):
        self.inner = inner
        self.cache = cache
        self.model_key = model_key if model_key is not None else str(getattr(inner, "name", "unknown"))
        self.hits = 0
        self.misses = 0
        self._inflight: dict[str, asyncio.Event] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not set yet (during unpickling): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def _effective(self, sampling: SamplingParams | None) -> SamplingParams:
        return sampling or getattr(self.inner, "sampling", None) or SamplingParams()

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        effective = self._effective(sampling)
        if not cacheable(effective):
            return await self.inner.chat(messages, tools=tools, sampling=sampling)
        key = request_key(self.model_key, messages, tools, effective)
        cached = self.cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        pending = self._inflight.get(key)
        if pending is not None:
            await pending.wait()  # the first sender's answer (or its failure: then send it ourselves)
            cached = self.cache.get(key)
            if cached is not None:
                self.hits += 1
                return cached
            return await self.inner.chat(messages, tools=tools, sampling=sampling)
        done = self._inflight[key] = asyncio.Event()
        try:
            self.misses += 1
            result = await self.inner.chat(messages, tools=tools, sampling=sampling)
            self.cache.put(key, result, self.model_key)
            return result
        finally:
            del self._inflight[key]
            done.set()


def cache_models(
    models: dict[str, ChatModel],
    cache: RequestCache,
    *,
    skip_roles: tuple[str, ...] = (),
    model_keys: dict[str, str] | None = None,
) -> dict[str, ChatModel]:
    """Wrap each model (once per distinct object, so roles sharing a model share a wrapper).

    `skip_roles` stay unwrapped (e.g. the judge, which caches its own verdicts); `model_keys`
    gives a role's model identity for the key (collection and evaluation pass each role's
    `ChatModelConfig.identity()`; default: the model's `name`).
    """
    wrapped: dict[int, CachedChatModel] = {}
    out: dict[str, ChatModel] = {}
    for role, model in models.items():
        if role in skip_roles or isinstance(model, CachedChatModel):
            out[role] = model
            continue
        if id(model) not in wrapped:
            key = (model_keys or {}).get(role)
            wrapped[id(model)] = CachedChatModel(model, cache, model_key=key)
        out[role] = wrapped[id(model)]
    return out
