"""The one chat interface every model backend implements.

A call takes OpenAI-style messages (+ optional tools and sampling settings) and returns the
assistant message with `content`, `reasoning_content` and `tool_calls` (OpenAI shape:
`{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}`), token usage
and latency. Backends never raise for a model's bad output; transport failures that outlast
retries raise `ChatError` (infrastructure: the episode is retried on resume); a request the
endpoint refuses raises `ChatRefused`, which the agents record in the episode.

Malformed tool calls are surfaced, never dropped or raised: a hermes `<tool_call>` block
that is not a JSON object with a `name` and object `arguments` becomes a tool call whose
`function.name` is the name if readable (else `""`) and whose `function.arguments` is the
raw block text. `executor_sft.llm.parsing.tool_call_error(call)` says whether (and why) a
call cannot be dispatched; agents apply it before running a tool.

`usage` may carry `counted_by`: "backend" (reported by the server/engine that generated),
"tokenizer" (counted locally because the endpoint reported none) or "estimate" (chars/4).

`sampled_tokens` carries the completion's token ids where the backend has them (the
transformers and in-process vLLM backends always; an OpenAI-compatible vLLM server when asked
with `return_token_ids`), so training can check it trains on what was sampled.

`logprobs` carries each sampled token's log-probability (and the `SamplingParams.logprobs` most
likely alternatives) where the call asked for them and the backend has them: the transformers
backend computes them, an OpenAI-compatible server returns them. They are the model's raw
distribution, before temperature and top-p, as vLLM reports by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from executor_sft.failures import InfrastructureError, RequestRefused
from executor_sft.schema import LLMCallRecord, Message, SampledTokens, TokenUsage


@dataclass
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int | None = None
    stop: list[str] | None = None
    enable_thinking: bool = False
    """Passed to the chat template (`chat_template_kwargs.enable_thinking` on vLLM/SGLang)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    logprobs: int | None = None
    """None: no log-probabilities; 0: each sampled token's; k (at most 20, OpenAI's limit): also
    the k most likely tokens at each step (`ChatResult.logprobs`)."""


@dataclass(frozen=True)
class TokenLogprob:
    """One completion token in OpenAI's `choices[].logprobs.content[]` terms."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    """The most likely tokens at this step with their log-probabilities, most likely first."""
    token_id: int | None = None
    """Where the backend knows it (in process; OpenAI's shape carries only the text)."""


@dataclass
class ChatResult:
    message: Message
    usage: TokenUsage
    latency_s: float
    model: str
    finish_reason: str | None = None
    """"stop", "length" or "tool_calls" when the backend knows; None otherwise."""
    sampled_tokens: SampledTokens | None = None
    """The ids the model sampled for `message`, where the backend returns them."""
    logprobs: list[TokenLogprob] | None = None
    """One entry per completion token when the call asked (`SamplingParams.logprobs`) and the
    backend has them; None otherwise."""

    def record(self, messages: list[Message], tools: list[dict] | None = None) -> LLMCallRecord:
        return LLMCallRecord(
            model=self.model,
            messages=list(messages),
            tools=tools,
            response=self.message,
            usage=self.usage,
            latency_s=self.latency_s,
            sampled_tokens=self.sampled_tokens,
        )


class ChatError(InfrastructureError):
    """A call that failed after all retries (transport, server or timeout), not a bad answer."""


class ChatRefused(RequestRefused):
    """The endpoint refused this request (a 4xx such as context_length_exceeded): the episode's
    own outcome, recorded as the call's error and never retried (`executor_sft.failures`)."""


@runtime_checkable
class ChatModel(Protocol):
    name: str

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult: ...
