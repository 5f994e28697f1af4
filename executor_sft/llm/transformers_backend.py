"""In-process generation with a transformers model (CPU tests, small local models).

Concurrency: generation runs on one worker thread owned by the model object, so the event
loop never blocks. Concurrent unseeded calls without stop strings and with the same sampling
settings (`max_tokens`, temperature, top_p) that queue up while a generation runs are
micro-batched into one left-padded `generate()` call of up to `max_batch_size` rows: on a CPU,
8 rows cost little more than one, which is what makes executor evaluation of a small model
practical, greedy or sampled (an unseeded sample is one draw whichever batch it is in). Padded
batches can change greedy outputs in the last bits on some models; pass `max_batch_size=1` for
strictly serial, unpadded generation. Seeded calls always run alone (their seeds stay meaningful).

Prefix reuse: the keys and values of every call's prompt and completion are kept (bounded, least
recently used out; `executor_sft.llm.prefix_cache`), and a call whose prompt starts with a kept
sequence prefills only the rest. An executor's next turn is its last prompt plus the completion
and the tool's answer, so from turn 2 on only those are prefilled; runs of one evaluation also
share the system prompt and tool schemas. Reused keys were computed in another pass, so logits
can differ in the last bits from a full prefill, as with padding.
On a CPU, a model with grouped key/value heads attends through `gqa_attention.grouped_sdpa`:
transformers' `sdpa` copies the whole key/value cache per group under a padding mask, which
made that copy the cost of a batched decode step.
For real throughput use vLLM (in-process `VLLMChatModel` or a server; its automatic prefix
caching does the same on a GPU).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams, TokenLogprob
from executor_sft.llm.offline import is_offline, load_offline
from executor_sft.llm.parsing import (
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CLOSE,
    TOOL_OPEN,
    parse_assistant_text,
    prompt_opens_think,
)
from executor_sft.llm.prefix_cache import DEFAULT_PREFIX_CACHE_TOKENS, PrefixCache, PrefixEntry, PrefixStats
from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.schema import Message, SampledTokens, TokenUsage

log = logging.getLogger(__name__)

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
    encoded: tuple[str, Any] | None = None
    """(prompt text, token ids), once the scheduler has needed them."""

    def encode(self, model: TransformersChatModel) -> tuple[str, Any]:
        if self.encoded is None:
            self.encoded = model._encode(self.messages, self.tools, self.sampling)
        return self.encoded


def _batch_key(sampling: SamplingParams) -> tuple | None:
    """Calls with equal keys can share one padded generate(); None means: run alone."""
    if sampling.seed is not None or sampling.stop:
        return None
    if sampling.temperature > 0:
        return (sampling.max_tokens, sampling.logprobs, sampling.temperature, sampling.top_p)
    return (sampling.max_tokens, sampling.logprobs)


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
        prefix_cache_tokens: most tokens of keys and values kept between calls for prefix reuse
            (`executor_sft.llm.prefix_cache`; 0 = none). A token costs
            2 x layers x kv_heads x head_dim x dtype bytes: 46 KB for SmolLM2-135M in fp32.
    """

    supports_logprobs = True
    """Computes `SamplingParams.logprobs` from the generation's raw logits (the server reads this)."""

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
        prefix_cache_tokens: int = DEFAULT_PREFIX_CACHE_TOKENS,
    ):
        if isinstance(model, str):
            name = name or model
            model, loaded_tok = load_model(model, dtype=dtype, device=device)
            tokenizer = tokenizer or loaded_tok
        elif tokenizer is None:
            raise ValueError("TransformersChatModel: pass the tokenizer along with a loaded model")
        self.model = model
        self.tokenizer = tokenizer
        if model.device.type == "cpu":
            from executor_sft.llm.gqa_attention import use_grouped_sdpa

            use_grouped_sdpa(model)
        from executor_sft.llm.append_cache import full_attention_only

        self._append_cache = full_attention_only(model.config)
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
        self.prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self.prefix_stats = PrefixStats()
        """Prompt tokens asked for and reused over this model's life (counted with reuse off too)."""
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
        logits: list[Any] | None = None,
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
            logprobs=None if logits is None else self._logprobs(generated[:n_completion], logits, sampling),
        )

    def _logprobs(self, ids: list[int], logits: list[Any], sampling: SamplingParams) -> list[TokenLogprob]:
        """Each sampled token's log-probability under the raw logits of its step (and the top k)."""
        import torch

        out = []
        for tok, step in zip(ids, logits, strict=False):
            logp = torch.log_softmax(step.float(), dim=-1)
            top: tuple[tuple[str, float], ...] = ()
            if sampling.logprobs:
                values, indices = logp.topk(sampling.logprobs)
                top = tuple(
                    (self.tokenizer.decode([i]), v)
                    for i, v in zip(indices.tolist(), values.tolist(), strict=True)
                )
            out.append(TokenLogprob(self.tokenizer.decode([tok]), float(logp[tok]), top, tok))
        return out

    def _encode(self, messages: list[Message], tools: list[dict] | None, sampling: SamplingParams):
        """(prompt text, its token ids as a 1-D tensor)."""
        prompt = render_prompt(self.tokenizer, messages, tools, sampling.enable_thinking)
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
        return prompt, ids

    def generate_sync(
        self, messages: list[Message], tools: list[dict] | None = None, sampling: SamplingParams | None = None
    ) -> ChatResult:
        """Blocking generation of one call; `chat` runs this on the model's worker thread."""
        return self.generate_batch_sync([(messages, tools)], sampling or self.sampling)[0]

    def generate_batch_sync(
        self,
        requests: list[tuple[list[Message], list[dict] | None]],
        sampling: SamplingParams,
        encoded: list[tuple[str, Any]] | None = None,
    ) -> list[ChatResult]:
        """One generate() for calls with the same sampling settings, left-padded (`encoded`: their
        prompts already rendered and tokenised, as `_encode` returns them)."""
        start = time.perf_counter()
        encoded = encoded or [self._encode(m, t, sampling) for m, t in requests]
        generated, logits = self._generate([ids for _, ids in encoded], sampling)
        return [
            self._result(
                prompt, int(ids.numel()), gen, tools, sampling, start, None if logits is None else logits[row]
            )
            for row, ((prompt, ids), gen, (_, tools)) in enumerate(
                zip(encoded, generated, requests, strict=True)
            )
        ]

    def _generate(
        self, prompts: list[Any], sampling: SamplingParams
    ) -> tuple[list[list[int]], list[Any] | None]:
        """The generated ids of each prompt (1-D id tensors), its cached prefix reused if any, and
        each row's raw logits per step when the call asks for log-probabilities."""
        import torch

        width = max(int(ids.numel()) for ids in prompts)
        pads = [width - int(ids.numel()) for ids in prompts]
        pad_id = self.tokenizer.pad_token_id
        pad_id = pad_id if pad_id is not None else self.tokenizer.eos_token_id
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (ids, pad) in enumerate(zip(prompts, pads, strict=True)):
            input_ids[row, pad:] = ids
            attention_mask[row, pad:] = 1
        device = self.model.device
        with self._lock, torch.inference_mode():
            past = self._cached_prefix(prompts, pads, width)
            if past is None and self._append_cache:
                from executor_sft.llm.append_cache import append_cache

                past = append_cache()
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                past_key_values=past,
                return_dict_in_generate=True,
                output_logits=sampling.logprobs is not None,
                **self._generate_kwargs(sampling),
            )
            generated = [out.sequences[row, width:].tolist() for row in range(len(prompts))]
            self._keep_prefixes(out.past_key_values, prompts, pads, generated)
        logits = None
        if sampling.logprobs is not None:
            logits = [[step[row] for step in out.logits] for row in range(len(prompts))]
        return generated, logits

    def _cached_prefix(self, prompts: list[Any], pads: list[int], width: int) -> Any:
        """A cache holding the longest prefix every row of the padded batch can reuse, or None.

        Row i's tokens sit at padded positions pads[i]..width; the batch can skip the first
        `shared` positions where every row's cached entry covers them (its pads are masked).
        At least one position is left to prefill, which yields the first token's logits.
        """
        stats, cache = self.prefix_stats, self.prefix_cache
        stats.requests += len(prompts)
        stats.prompt_tokens += sum(int(ids.numel()) for ids in prompts)
        if cache is None:
            return None
        hits = [cache.longest(ids) for ids in prompts]
        shared = min(pad + n for pad, (_, n) in zip(pads, hits, strict=True))
        shared = min(shared, width - 1)
        if shared <= max(pads):
            return None
        stats.reused_tokens += sum(shared - pad for pad in pads)
        import torch
        from transformers import DynamicCache

        from executor_sft.llm.append_cache import append_cache

        layers = []
        for layer in range(len(hits[0][0].keys)):
            keys, values = [], []
            for pad, (entry, _) in zip(pads, hits, strict=True):
                k, v = entry.keys[layer][:, : shared - pad], entry.values[layer][:, : shared - pad]
                keys.append(_left_pad(k, pad))
                values.append(_left_pad(v, pad))
            layers.append((torch.stack(keys), torch.stack(values)))
        return append_cache(layers) if self._append_cache else DynamicCache(ddp_cache_data=layers)

    def _keep_prefixes(
        self, past: Any, prompts: list[Any], pads: list[int], generated: list[list[int]]
    ) -> None:
        """Store each row's prompt and completion (up to its end of turn) with their keys and values."""
        cache = self.prefix_cache
        if cache is None or past is None:
            return
        from executor_sft.llm.append_cache import FULL_ATTENTION_LAYERS

        if not all(type(layer) in FULL_ATTENTION_LAYERS for layer in past.layers):
            log.warning("%s: prefix reuse is off: the model's cache is not a full-attention cache", self.name)
            self.prefix_cache = None
            return
        import torch

        held = past.get_seq_length()  # the last generated token is never fed back
        for row, (ids, pad, gen) in enumerate(zip(prompts, pads, generated, strict=True)):
            turn = gen[: self._completion_length(gen)]
            n = min(int(ids.numel()) + len(turn), held - pad)
            fed = torch.cat([ids, torch.tensor(turn, dtype=ids.dtype)])[:n]
            cache.store(
                PrefixEntry(
                    ids=fed,
                    keys=[layer.keys[row, :, pad : pad + n].clone() for layer in past.layers],
                    values=[layer.values[row, :, pad : pad + n].clone() for layer in past.layers],
                )
            )

    def _completion_length(self, generated: list[int]) -> int:
        """Tokens up to and including the first end-of-turn token (all of them if none)."""
        for i, tok in enumerate(generated):
            if tok in self.stop_ids:
                return i + 1
        return len(generated)

    def _drain(self) -> None:
        """Worker thread: run the queued calls that can share a batch with the first in line.

        First in line is the call whose prompt the prefix cache holds furthest (then the oldest):
        a run's next turn goes before other runs' first turns, so the runs in flight finish and
        their entries are reused before eviction, instead of every run starting at once.
        A left-padded batch prefills, in every row, as many positions as its row with the most
        new tokens needs, so the batch takes the calls whose new-token counts are closest to the
        first's (`_close_in_new_tokens`): one call the cache misses no longer makes 24 calls
        with hits prefill in full.
        """
        with self._pending_lock:
            if not self._pending:
                return
            key = None
            if self.prefix_cache is not None:
                new, held = {}, {}
                for p in self._pending:
                    ids = p.encode(self)[1]
                    held[id(p)] = self.prefix_cache.reusable(ids)
                    new[id(p)] = int(ids.numel()) - held[id(p)]
                first = max(self._pending, key=lambda p: held[id(p)])  # the oldest among equals
                key = _batch_key(first.sampling)
                same = [p for p in self._pending if _batch_key(p.sampling) == key]
                batch = _close_in_new_tokens(first, same, new, self.max_batch_size)
            else:
                key = _batch_key(self._pending[0].sampling)
                batch = [p for p in self._pending if _batch_key(p.sampling) == key][: self.max_batch_size]
            self._pending = [p for p in self._pending if not any(p is b for b in batch)]
        try:
            encoded = [p.encoded for p in batch] if all(p.encoded for p in batch) else None
            results = self.generate_batch_sync(
                [(p.messages, p.tools) for p in batch], batch[0].sampling, encoded
            )
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


NEW_TOKEN_SLACK = 64
"""A call joins a batch if its new tokens are at most twice the first call's, plus this many."""


def _close_in_new_tokens(
    first: _Pending, candidates: list[_Pending], new: dict[int, int], size: int
) -> list[_Pending]:
    """`first` and the candidates whose new-token counts are nearest its own, at most `size` calls.

    Only calls within twice the first's count (plus `NEW_TOKEN_SLACK`) join: the batch's prefill
    costs its rows times its largest new-token count, so a far larger one would cost more than
    running it in a batch of its own.
    """
    limit = 2 * new[id(first)] + NEW_TOKEN_SLACK
    others = sorted(
        (p for p in candidates if p is not first and new[id(p)] <= limit),
        key=lambda p: abs(new[id(p)] - new[id(first)]),
    )
    return [first, *others[: size - 1]]


def _left_pad(t: Any, pad: int) -> Any:
    """`t` ([heads, len, dim]) with `pad` zero positions before it (masked in attention)."""
    if pad == 0:
        return t
    import torch

    return torch.cat([t.new_zeros(t.shape[0], pad, t.shape[2]), t], dim=1)


def _set_result(future: asyncio.Future, result: ChatResult) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
