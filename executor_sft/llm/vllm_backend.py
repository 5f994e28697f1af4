"""In-process vLLM (`AsyncLLM`, vLLM 0.31) behind the `ChatModel` interface (GPU extra).

Prompts are rendered with the tokenizer's chat template and outputs parsed with the same
parser as the transformers backend, so both in-process backends produce identical messages
for identical text. vLLM batches concurrent calls itself (continuous batching). Each result
carries the sampled token ids (`ChatResult.sampled_tokens`), as the transformers backend's does.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.llm.parsing import parse_assistant_text, prompt_opens_think
from executor_sft.llm.transformers_backend import render_prompt
from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.schema import Message, SampledTokens, TokenUsage

VLLM_MISSING = (
    "VLLMChatModel needs vLLM, which is not installed. Install the GPU extra: "
    "pip install 'executor-sft[gpu]' (vllm==0.31.0, CUDA machines only), or use "
    "backend 'openai' against a `vllm serve` endpoint instead."
)


def _import_vllm():
    try:
        import vllm
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:
        raise ImportError(VLLM_MISSING) from exc
    return vllm, AsyncEngineArgs, AsyncLLM


class VLLMChatModel:
    """A `ChatModel` on an in-process vLLM engine.

    Args:
        model: a local path or hub id.
        tokenizer: a loaded tokenizer (default: `AutoTokenizer.from_pretrained(model)`).
        name: reported as `ChatResult.model`.
        sampling: defaults for calls that pass no `SamplingParams`.
        chat_template: replaces the tokenizer's template.
        engine_kwargs: passed to `AsyncEngineArgs` (e.g. gpu_memory_utilization, max_model_len,
            tensor_parallel_size, enable_prefix_caching).
    """

    def __init__(
        self,
        model: str,
        tokenizer: Any | None = None,
        *,
        name: str | None = None,
        sampling: SamplingParams | None = None,
        chat_template: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ):
        vllm, engine_args_cls, async_llm_cls = _import_vllm()
        self._vllm = vllm
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        self.tokenizer = tokenizer
        self.name = name or model
        self.sampling = sampling or SamplingParams()
        self.engine = async_llm_cls.from_engine_args(engine_args_cls(model=model, **(engine_kwargs or {})))

    def __repr__(self) -> str:
        return f"VLLMChatModel(name={self.name!r})"

    def _params(self, sampling: SamplingParams):
        return self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            stop=sampling.stop or None,
            skip_special_tokens=True,
        )

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        sampling = sampling or self.sampling
        start = time.perf_counter()
        prompt = render_prompt(self.tokenizer, messages, tools, sampling.enable_thinking)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        final = None
        async for output in self.engine.generate(
            {"prompt_token_ids": prompt_ids}, self._params(sampling), f"chat-{uuid.uuid4().hex}"
        ):
            final = output
        completion = final.outputs[0] if final is not None and final.outputs else None
        text = completion.text if completion is not None else ""
        parsed = parse_assistant_text(text, parse_tools=bool(tools), think_open=prompt_opens_think(prompt))
        finish = completion.finish_reason if completion is not None else None
        if parsed.tool_calls and finish == "stop":
            finish = "tool_calls"
        return ChatResult(
            message=parsed.to_message(),
            usage=TokenUsage(
                prompt_tokens=len(prompt_ids),
                completion_tokens=len(completion.token_ids) if completion is not None else 0,
                counted_by="backend",
            ),
            latency_s=time.perf_counter() - start,
            model=self.name,
            finish_reason=finish,
            sampled_tokens=(
                SampledTokens(ids=list(completion.token_ids), vocabulary=vocabulary_id(self.tokenizer))
                if completion is not None
                else None
            ),
        )

    def close(self) -> None:
        self.engine.shutdown()
