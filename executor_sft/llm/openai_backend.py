"""OpenAI-compatible chat endpoints (vLLM, SGLang, hosted APIs) behind the `ChatModel` interface.

Why our own retry loop (the SDK's `max_retries` is 0): rollouts run thousands of concurrent
calls against several replicas, so a failed attempt should move to another replica, back off
with full jitter (no thundering herd after a 429 burst) and end in one exception classified as
`executor_sft.failures` says: `ChatError` (infrastructure: the episode is retried on resume) or
`ChatRefused` (a request the endpoint refuses: recorded as the episode's own), not a stack of
SDK exceptions.

The API key is read from the environment variable named by `api_key_env` at construction
and only handed to the SDK clients; it is never stored on this object, logged, or included
in reprs and error messages (those are scrubbed in case a server echoes it back).

A 200 whose body is not a chat completion (a proxy's HTML error page, truncated JSON, an
`{"error": ...}` object, no choices) is a transport failure, not an answer: it is retried
like a 5xx and logged as one line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import weakref
from dataclasses import dataclass
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletion

from executor_sft.failures import status_kind
from executor_sft.llm.base import ChatError, ChatRefused, ChatResult, SamplingParams, TokenLogprob
from executor_sft.llm.parsing import THINK_CLOSE, TOOL_OPEN, parse_assistant_text
from executor_sft.llm.routing import EndpointPool, Replica, route_key
from executor_sft.llm.usage import count_usage
from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.schema import Message, SampledTokens, TokenUsage
from executor_sft.urls import hide_passwords_in_http_logs, redact

log = logging.getLogger(__name__)


@dataclass
class _Retry:
    """An attempt that failed in a way the next one may not (a 5xx, a timeout, a dropped connection)."""

    reason: str
    retry_after: float | None = None

    def __str__(self) -> str:
        return self.reason


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class OpenAIChatModel:
    """Chat over one or more OpenAI-compatible base URLs with balancing, limits and retries.

    Args:
        model: the served model name sent in each request.
        base_urls: one URL or a list (replicas), routed by an `EndpointPool`
            (`executor_sft.llm.routing`): the calls of one executor run or episode stay on one
            replica, a new one goes to the replica with the fewest requests in flight (ties
            round-robin), and a replica that refused a connection or answered 5xx is skipped
            (for `down_cooldown_s`, or until its health check passes when `health_check_s` > 0).
        health_check_s: poll every replica's `/health` this often (0: no checks).
        api_key_env: name of the environment variable holding the key (None: no key, sends
            "EMPTY" as vLLM/SGLang expect).
        max_concurrency: at most this many requests in flight from this object.
        timeout_s: wall-clock limit of one attempt.
        max_retries: further attempts after the first on what `executor_sft.failures` calls
            retryable (408/409/425/429/5xx, timeouts, connection errors, malformed 200s);
            400/413/414/422 raise `ChatRefused` at once (the episode's own outcome), any other
            4xx `ChatError` at once; backoff is full jitter, `uniform(0, min(backoff_max_s,
            backoff_base_s * 2**attempt))`, or the server's Retry-After when larger.
        sampling: defaults for calls that pass no `SamplingParams`.
        extra_body: sent with every request (merged under the call's own `extra_body`).
        pass_enable_thinking: send `chat_template_kwargs.enable_thinking` (vLLM/SGLang);
            turn off for hosted APIs that reject unknown fields.
        tokenizer: counts tokens when the endpoint reports no usage (else estimated).
        parse_text_fallback: parse `<think>`/`<tool_call>` from content when the endpoint
            returned them unparsed (a server started without a reasoning/tool parser).
        max_tokens_field: the request field that carries `SamplingParams.max_tokens`.
            "max_tokens" (default) is what vLLM, SGLang and most hosted OpenAI-compatible APIs
            read; OpenAI's reasoning models reject it and need "max_completion_tokens"
            (which vLLM also accepts).
        return_token_ids: ask the server for the sampled token ids (vLLM's `return_token_ids`,
            vLLM >= 0.10.2; its choice then carries `token_ids`) and keep them as
            `ChatResult.sampled_tokens`; `tokenizer` names their vocabulary (without it they
            are kept with vocabulary None, which token fidelity cannot compare).
    """

    def __init__(
        self,
        model: str,
        base_urls: str | list[str] = "http://127.0.0.1:8000/v1",
        *,
        api_key_env: str | None = None,
        name: str | None = None,
        max_concurrency: int = 32,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        down_cooldown_s: float = 5.0,
        health_check_s: float = 0.0,
        sampling: SamplingParams | None = None,
        extra_body: dict[str, Any] | None = None,
        pass_enable_thinking: bool = True,
        tokenizer: Any | None = None,
        parse_text_fallback: bool = True,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        return_token_ids: bool = False,
    ):
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(
                f"OpenAIChatModel: max_tokens_field must be max_tokens or max_completion_tokens, "
                f"got {max_tokens_field!r}"
            )
        self.max_tokens_field = max_tokens_field
        if not urls:
            raise ValueError("OpenAIChatModel: base_urls is empty")
        if max_concurrency < 1:
            raise ValueError(f"OpenAIChatModel: max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        self.name = name or model
        self.api_key_env = api_key_env
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(
                    f"OpenAIChatModel({self.name}): environment variable {api_key_env} is not set"
                )
        else:
            key = "EMPTY"
        # Kept only inside a closure that builds clients; not an attribute of this object.
        self._make_client = _client_factory(key, timeout_s)
        self._scrub = _scrubber(key if api_key_env else None)
        self.pool = EndpointPool(urls, down_cooldown_s=down_cooldown_s, health_check_s=health_check_s)
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.down_cooldown_s = down_cooldown_s
        self.sampling = sampling or SamplingParams()
        self.extra_body = dict(extra_body or {})
        self.pass_enable_thinking = pass_enable_thinking
        self.tokenizer = tokenizer
        self.return_token_ids = return_token_ids
        self.parse_text_fallback = parse_text_fallback
        # Clients and the semaphore belong to an event loop; keep one set per loop.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        urls = [redact(e.base_url) for e in self.endpoints]
        return f"OpenAIChatModel(name={self.name!r}, model={self.model!r}, base_urls={urls!r}, api_key_env={self.api_key_env!r})"

    # -- plumbing -------------------------------------------------------------------------
    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = _LoopState(asyncio.Semaphore(self.max_concurrency), {})
            self._loops[loop] = state
        return state

    def _client(self, state: _LoopState, endpoint: Replica) -> openai.AsyncOpenAI:
        client = state.clients.get(endpoint.base_url)
        if client is None:
            client = state.clients[endpoint.base_url] = self._make_client(endpoint.base_url)
        return client

    @property
    def endpoints(self) -> list[Replica]:
        return self.pool.replicas

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2**attempt))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay

    async def aclose(self) -> None:
        """Close the HTTP clients opened on the running event loop."""
        await self.pool.aclose()
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state:
            await asyncio.gather(*(c.close() for c in state.clients.values()), return_exceptions=True)

    # -- request / response ---------------------------------------------------------------
    def _request(
        self, messages: list[Message], tools: list[dict] | None, sampling: SamplingParams
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        body.update(self.extra_body)
        body.update(sampling.extra_body or {})
        if self.pass_enable_thinking:
            kwargs = dict(body.get("chat_template_kwargs") or {})
            kwargs.setdefault("enable_thinking", sampling.enable_thinking)
            body["chat_template_kwargs"] = kwargs
        if self.return_token_ids:
            body["return_token_ids"] = True
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            self.max_tokens_field: sampling.max_tokens,
        }
        if tools:
            request["tools"] = tools
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if sampling.stop:
            request["stop"] = sampling.stop
        if sampling.logprobs is not None:
            request["logprobs"] = True
            if sampling.logprobs:
                request["top_logprobs"] = sampling.logprobs
        if body:
            request["extra_body"] = body
        return request

    def _message(self, choice: Any, tools: list[dict] | None) -> Message:
        raw = choice.message
        extra = raw.model_extra or {}
        content = raw.content or ""
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        tool_calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name or "", "arguments": call.function.arguments or ""},
            }
            for call in raw.tool_calls or []
            if getattr(call, "function", None) is not None
        ]
        needs_parse = (not reasoning and THINK_CLOSE in content) or (
            tools and not tool_calls and TOOL_OPEN in content
        )
        if self.parse_text_fallback and needs_parse:
            parsed = parse_assistant_text(content, parse_tools=bool(tools) and not tool_calls)
            content = parsed.content
            reasoning = reasoning or parsed.reasoning_content
            tool_calls = tool_calls or parsed.tool_calls
        message: Message = {"role": "assistant", "content": content}
        if reasoning:
            message["reasoning_content"] = reasoning
        if tool_calls:
            message["tool_calls"] = tool_calls
        return message

    def _failure(self, exc: Exception, endpoint: Replica) -> _Retry | ChatError | ChatRefused:
        """What a failed attempt on `endpoint` means (`executor_sft.failures`): another attempt, or
        `ChatRefused` / `ChatError` at once. Texts are scrubbed of the key; a replica that refused the
        connection or answered 5xx is marked down."""
        if isinstance(exc, json.JSONDecodeError):  # the SDK parses an application/json body unguarded
            return _Retry(f"HTTP 200 with a body that is not JSON: {self._scrub(_snippet(exc.doc))}")
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            return _Retry(f"timeout after {self.timeout_s:g}s")
        if isinstance(exc, openai.APIConnectionError):
            self.pool.mark_down(endpoint)
            return _Retry(f"connection error: {self._scrub(str(exc))}")
        where = f"{self.name} at {redact(endpoint.base_url)}"
        if isinstance(exc, openai.APIStatusError):
            code = f" [{exc.code}]" if isinstance(getattr(exc, "code", None), str) else ""
            detail = f"HTTP {exc.status_code}{code}: {self._scrub(str(exc))[:500]}"
            kind = status_kind(exc.status_code)
            if kind == "retry":
                if exc.status_code >= 500:
                    self.pool.mark_down(endpoint)
                return _Retry(detail, _retry_after(exc))
            if kind == "outcome":  # this request is refused (context length, body too large)
                return ChatRefused(f"{where}: {detail}")
            return ChatError(f"{where}: {detail}")  # a wrong key, model or URL: every attempt would meet it
        # any other SDK error: not worth another attempt
        return ChatError(f"{where}: {type(exc).__name__}: {self._scrub(str(exc))[:500]}")

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        sampling = sampling or self.sampling
        request = self._request(messages, tools, sampling)
        state = self._state()
        async with state.semaphore:
            start = time.perf_counter()
            tried: set[str] = set()
            errors: list[str] = []
            key = route_key()
            for attempt in range(self.max_retries + 1):
                endpoint = self.pool.pick(tried, key)
                endpoint.in_flight += 1
                endpoint.requests += 1
                # The failure is built inside the handler but raised outside it, so the SDK exception
                # (whose text may quote request headers) is not attached as __context__.
                try:
                    response = await asyncio.wait_for(
                        self._client(state, endpoint).chat.completions.create(**request), self.timeout_s
                    )
                    if _is_completion(response):
                        break
                    body = self._scrub(_snippet(response))
                    failure = _Retry(f"HTTP 200 with a body that is not a chat completion: {body}")
                except (json.JSONDecodeError, TimeoutError, openai.APIError) as exc:
                    failure = self._failure(exc, endpoint)
                finally:
                    endpoint.in_flight -= 1
                if not isinstance(failure, _Retry):
                    raise failure
                endpoint.failures += 1
                errors.append(f"{redact(endpoint.base_url)}: {failure}")
                tried.add(endpoint.base_url)
                if len(tried) == len(self.endpoints):
                    tried.clear()
                if attempt < self.max_retries:
                    delay = self._backoff(attempt, failure.retry_after)
                    log.info(
                        "%s: attempt %d failed (%s); retry in %.2fs", self.name, attempt + 1, failure, delay
                    )
                    await asyncio.sleep(delay)
            else:
                first = f" (first: {errors[0]})" if len(errors) > 1 else ""
                raise ChatError(f"{self.name}: {len(errors)} attempts failed; last: {errors[-1]}{first}")
            latency = time.perf_counter() - start
        choice = response.choices[0]
        message = self._message(choice, tools)
        usage = _usage(response.usage) or count_usage(messages, tools, message, self.tokenizer)
        return ChatResult(
            message=message,
            usage=usage,
            latency_s=latency,
            model=response.model or self.model,
            finish_reason=choice.finish_reason,
            sampled_tokens=self._sampled_tokens(choice),
            logprobs=_logprobs(choice) if request.get("logprobs") else None,
        )

    def _sampled_tokens(self, choice: Any) -> SampledTokens | None:
        """The choice's `token_ids` (vLLM's, when asked with `return_token_ids`), if it holds a list of ints."""
        ids = (choice.model_extra or {}).get("token_ids") if self.return_token_ids else None
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            return None
        vocabulary = vocabulary_id(self.tokenizer) if self.tokenizer is not None else None
        return SampledTokens(ids=ids, vocabulary=vocabulary)


def _is_completion(response: Any) -> bool:
    """Whether the SDK's result is a completion with a first choice holding a message.

    The SDK builds responses without validation and returns a non-JSON body as a `str`.
    """
    if not isinstance(response, ChatCompletion):
        return False
    choices = getattr(response, "choices", None)
    return bool(choices) and isinstance(choices, list) and getattr(choices[0], "message", None) is not None


def _snippet(body: Any, limit: int = 200) -> str:
    """The start of a body on one line, for a log line and the final error."""
    text = body.model_dump_json(exclude_unset=True) if isinstance(body, ChatCompletion) else str(body)
    text = " ".join(text.split())
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


@dataclass
class _LoopState:
    semaphore: asyncio.Semaphore
    clients: dict[str, openai.AsyncOpenAI]


def _usage(usage: Any) -> TokenUsage | None:
    if usage is None or usage.prompt_tokens is None:
        return None
    return TokenUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens or 0,
        counted_by="backend",
    )


def _client_factory(key: str, timeout_s: float):
    def make(base_url: str) -> openai.AsyncOpenAI:
        hide_passwords_in_http_logs()
        return openai.AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            max_retries=0,
            timeout=openai.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        )

    return make


def _scrubber(key: str | None):
    def scrub(text: str) -> str:
        return text.replace(key, "***") if key else text

    return scrub


def _logprobs(choice: Any) -> list[TokenLogprob] | None:
    """The choice's `logprobs.content` as `TokenLogprob`s (None where the server sent none)."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if content is None:
        return None
    return [
        TokenLogprob(
            token=entry.token,
            logprob=entry.logprob,
            top=tuple((alt.token, alt.logprob) for alt in entry.top_logprobs or []),
        )
        for entry in content
    ]
