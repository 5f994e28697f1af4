"""In-process generation with a transformers model (CPU tests, small local models).

Concurrency: generation runs on one worker thread owned by the model object, so the event
loop never blocks. Concurrent unseeded calls without stop strings and with the same sampling
settings (`max_tokens`, temperature, top_p) that queue up while a generation runs are
micro-batched into one left-padded `generate()` call of up to `max_batch_size` rows: on a CPU,
8 rows cost little more than one, which is what makes executor evaluation of a small model
practical, greedy or sampled (an unseeded sample is one draw whichever batch it is in). Padded
batches can change greedy outputs in the last bits on some models; pass `max_batch_size=1` for
strictly serial, unpadded generation. Seeded calls always run alone (their seeds stay meaningful).
For real throughput use vLLM (in-process `VLLMChatModel` or a server).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from dataclasses import dataclass
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.llm.offline import is_offline, load_offline
from executor_sft.llm.parsing import (
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CLOSE,
    TOOL_OPEN,
    parse_assistant_text,
    prompt_opens_think,
)
from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.schema import Message, SampledTokens, TokenUsage

_KEEP_MARKERS = {THINK_OPEN, THINK_CLOSE, TOOL_OPEN, TOOL_CLOSE}


def load_model(name_or_path: str, dtype: str = "float32", device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from an offline alias or a local/hub path."""
    if is_offline(name_or_path):
        model, tokenizer = load_offline(name_or_path, dtype)
    else:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=getattr(torch, dtype))
    if device:
        model = model.to(device)
    model.eval()
    return model, tokenizer


def render_prompt(
    tokenizer: Any, messages: list[Message], tools: list[dict] | None, enable_thinking: bool
) -> str:
    """The prompt text from the tokenizer's chat template (tools and enable_thinking passed through)."""
    return tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=True,
        tokenize=False,
        enable_thinking=enable_thinking,
    )


def decode_completion(tokenizer: Any, token_ids: list[int], stop_ids: set[int]) -> tuple[str, int, bool]:
    """Generated ids -> (text without special tokens except think/tool markers, n tokens, stopped).

    Generation ends at the first stop (end-of-turn) token; it is counted in usage but not
    returned as text.
    """
    n = len(token_ids)
    stopped = False
    for i, tok in enumerate(token_ids):
        if tok in stop_ids:
            n, stopped = i + 1, True
            break
    body = token_ids[: n - 1] if stopped else token_ids[:n]
    text = tokenizer.decode(body, skip_special_tokens=False)
    for special in getattr(tokenizer, "all_special_tokens", []):
        if special and special not in _KEEP_MARKERS:
            text = text.replace(special, "")
    return text, n, stopped


@dataclass
class _Pending:
    messages: list[Message]
    tools: list[dict] | None
    sampling: SamplingParams
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


def _batch_key(sampling: SamplingParams) -> tuple | None:
    """Calls with equal keys can share one padded generate(); None means: run alone."""
    if sampling.seed is not None or sampling.stop:
        return None
    if sampling.temperature > 0:
        return (sampling.max_tokens, sampling.temperature, sampling.top_p)
    return (sampling.max_tokens,)


class TransformersChatModel:
    """A `ChatModel` over a transformers causal LM and its tokenizer's chat template.

    Args:
        model: a loaded model, or a path / hub id / offline alias ("offline:tiny-qwen3",
            "offline:smollm2") to load.
        tokenizer: required with a loaded model; loaded along with a path or alias.
        name: reported as `ChatResult.model` (default: the alias/path or the model's name).
        sampling: defaults for calls that pass no `SamplingParams`.
        chat_template: replaces the tokenizer's template (e.g. `chatml_tools_template()`).
        max_batch_size: most unseeded calls merged into one generate() (1 = never batch).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any | None = None,
        *,
        name: str | None = None,
        sampling: SamplingParams | None = None,
        chat_template: str | None = None,
        dtype: str = "float32",
        device: str | None = None,
        max_batch_size: int = 8,
    ):
        if isinstance(model, str):
            name = name or model
            model, loaded_tok = load_model(model, dtype=dtype, device=device)
            tokenizer = tokenizer or loaded_tok
        elif tokenizer is None:
            raise ValueError("TransformersChatModel: pass the tokenizer along with a loaded model")
        self.model = model
        self.tokenizer = tokenizer
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.sampling = sampling or SamplingParams()
        stop = model.generation_config.eos_token_id
        stop_ids = set(stop if isinstance(stop, list) else [stop] if stop is not None else [])
        if tokenizer.eos_token_id is not None:
            stop_ids.add(tokenizer.eos_token_id)
        self.stop_ids = stop_ids
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tf-chat")
        self._lock = threading.Lock()  # also guards direct `generate_sync` callers
        self.max_batch_size = max(1, max_batch_size)
        self._pending: list[_Pending] = []
        self._pending_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TransformersChatModel(name={self.name!r})"

    def _generate_kwargs(self, sampling: SamplingParams) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "eos_token_id": sorted(self.stop_ids) or None,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tokenizer)
        return kwargs

    def _result(
        self,
        prompt: str,
        n_prompt: int,
        generated: list[int],
        tools: list[dict] | None,
        sampling: SamplingParams,
        start: float,
    ) -> ChatResult:
        text, n_completion, stopped = decode_completion(self.tokenizer, generated, self.stop_ids)
        finish = "stop" if stopped else "length"
        for s in sampling.stop or []:
            cut = text.find(s)
            if cut >= 0:
                text, finish = text[:cut], "stop"
        parsed = parse_assistant_text(text, parse_tools=bool(tools), think_open=prompt_opens_think(prompt))
        if parsed.tool_calls and finish == "stop":
            finish = "tool_calls"
        return ChatResult(
            message=parsed.to_message(),
            usage=TokenUsage(prompt_tokens=n_prompt, completion_tokens=n_completion, counted_by="backend"),
            latency_s=time.perf_counter() - start,
            model=self.name,
            finish_reason=finish,
            sampled_tokens=SampledTokens(
                ids=generated[:n_completion], vocabulary=vocabulary_id(self.tokenizer)
            ),
        )

    def generate_sync(
        self, messages: list[Message], tools: list[dict] | None = None, sampling: SamplingParams | None = None
    ) -> ChatResult:
        """Blocking generation of one call; `chat` runs this on the model's worker thread."""
        import torch

        sampling = sampling or self.sampling
        start = time.perf_counter()
        prompt = render_prompt(self.tokenizer, messages, tools, sampling.enable_thinking)
        enc = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        with self._lock, torch.inference_mode():
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            out = self.model.generate(**enc, **self._generate_kwargs(sampling))
        n_prompt = enc["input_ids"].shape[1]
        return self._result(prompt, n_prompt, out[0, n_prompt:].tolist(), tools, sampling, start)

    def generate_batch_sync(
        self, requests: list[tuple[list[Message], list[dict] | None]], sampling: SamplingParams
    ) -> list[ChatResult]:
        """One left-padded generate() for several calls with the same sampling settings."""
        import torch

        if len(requests) == 1:
            return [self.generate_sync(requests[0][0], requests[0][1], sampling)]
        start = time.perf_counter()
        prompts = [render_prompt(self.tokenizer, m, t, sampling.enable_thinking) for m, t in requests]
        side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "left"
        try:
            enc = self.tokenizer(prompts, return_tensors="pt", add_special_tokens=False, padding=True)
        finally:
            self.tokenizer.padding_side = side
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        with self._lock, torch.inference_mode():
            out = self.model.generate(**enc, **self._generate_kwargs(sampling))
        width = enc["input_ids"].shape[1]
        lengths = enc["attention_mask"].sum(dim=1).tolist()
        return [
            self._result(prompt, int(n), out[i, width:].tolist(), tools, sampling, start)
            for i, (prompt, n, (_, tools)) in enumerate(zip(prompts, lengths, requests, strict=True))
        ]

    def _drain(self) -> None:
        """Worker thread: run every queued call that can share a batch with the oldest one."""
        with self._pending_lock:
            if not self._pending:
                return
            key = _batch_key(self._pending[0].sampling)
            batch = [p for p in self._pending if _batch_key(p.sampling) == key][: self.max_batch_size]
            self._pending = [p for p in self._pending if not any(p is b for b in batch)]
        try:
            results = self.generate_batch_sync([(p.messages, p.tools) for p in batch], batch[0].sampling)
        except BaseException as exc:  # deliver the failure to every waiting caller
            for p in batch:
                p.loop.call_soon_threadsafe(_set_exception, p.future, exc)
            return
        for p, result in zip(batch, results, strict=True):
            p.loop.call_soon_threadsafe(_set_result, p.future, result)

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        loop = asyncio.get_running_loop()
        sampling = sampling or self.sampling
        if self.max_batch_size == 1 or _batch_key(sampling) is None:
            return await loop.run_in_executor(self._executor, self.generate_sync, messages, tools, sampling)
        future = loop.create_future()
        with self._pending_lock:
            self._pending.append(_Pending(messages, tools, sampling, future, loop))
        loop.run_in_executor(self._executor, self._drain)
        return await future

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _set_result(future: asyncio.Future, result: ChatResult) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
