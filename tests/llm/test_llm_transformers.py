"""TransformersChatModel with the tiny random Qwen3 and the real SmolLM2-135M-Instruct."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm import SamplingParams, TransformersChatModel, build_chat_model
from executor_sft.llm.transformers_backend import decode_completion, render_prompt

QUESTION = [
    {"role": "system", "content": "You are a search agent."},
    {"role": "user", "content": "Who directed Jaws?"},
]


@pytest.fixture(scope="module")
def tiny_chat():
    from tests.support import tiny_qwen3

    model, tokenizer = tiny_qwen3()
    return TransformersChatModel(model, tokenizer, name="tiny")


def test_tiny_prompt_rendering_and_usage(tiny_chat):
    tok = tiny_chat.tokenizer
    with_tools = render_prompt(tok, QUESTION, [SEARCH_TOOL], enable_thinking=False)
    assert json.dumps(SEARCH_TOOL) in with_tools and "<tools>" in with_tools
    assert with_tools.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = render_prompt(tok, QUESTION, None, enable_thinking=True)
    assert thinking.endswith("<|im_start|>assistant\n") and "<tools>" not in thinking

    result = asyncio.run(
        tiny_chat.chat(QUESTION, tools=[SEARCH_TOOL], sampling=SamplingParams(max_tokens=12))
    )
    assert result.usage.prompt_tokens == len(tok(with_tools, add_special_tokens=False)["input_ids"])
    assert 1 <= result.usage.completion_tokens <= 12
    assert result.usage.counted_by == "backend"
    assert result.finish_reason in {"stop", "length", "tool_calls"}
    assert result.model == "tiny" and result.latency_s > 0
    msg = result.message
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    for call in msg.get("tool_calls", []):
        assert isinstance(call["function"]["arguments"], str)


def test_tiny_greedy_and_seeded_sampling_reproduce(tiny_chat):
    greedy = SamplingParams(max_tokens=10)
    a = asyncio.run(tiny_chat.chat(QUESTION, sampling=greedy))
    b = asyncio.run(tiny_chat.chat(QUESTION, sampling=greedy))
    assert a.message == b.message
    sampled = SamplingParams(max_tokens=10, temperature=1.0, seed=7)
    c = asyncio.run(tiny_chat.chat(QUESTION, sampling=sampled))
    d = asyncio.run(tiny_chat.chat(QUESTION, sampling=sampled))
    assert c.message == d.message and c.usage == d.usage
    texts = {
        json.dumps(
            asyncio.run(
                tiny_chat.chat(QUESTION, sampling=SamplingParams(max_tokens=10, temperature=1.0, seed=s))
            ).message
        )
        for s in range(4)
    }
    assert len(texts) > 1  # seeds actually change sampled output


def test_generation_does_not_block_event_loop(tiny_chat):
    async def run():
        ticks = 0
        stop = asyncio.Event()

        async def heartbeat():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        beat = asyncio.create_task(heartbeat())
        start = time.perf_counter()
        results = await asyncio.gather(
            *(tiny_chat.chat(QUESTION, sampling=SamplingParams(max_tokens=24)) for _ in range(3))
        )
        elapsed = time.perf_counter() - start
        stop.set()
        await beat
        return ticks, elapsed, results

    ticks, elapsed, results = asyncio.run(run())
    assert len(results) == 3 and all(r.usage.completion_tokens >= 1 for r in results)
    # The loop kept ticking while three generations ran on the worker thread.
    assert ticks >= 3 and ticks >= elapsed / 0.05


def test_decode_with_real_qwen3_vocabulary(qwen3_tokenizer):
    """Markers survive decoding, end-of-turn ends it and is counted, later tokens are dropped."""
    text = '<think>\nplan\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "Jaws"}}\n</tool_call>'
    ids = qwen3_tokenizer(text + "<|im_end|>junk", add_special_tokens=False)["input_ids"]
    im_end = qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
    decoded, n, stopped = decode_completion(qwen3_tokenizer, ids, {im_end})
    assert decoded == text and stopped and n == ids.index(im_end) + 1
    from executor_sft.llm.parsing import parse_assistant_text

    parsed = parse_assistant_text(decoded)
    assert parsed.reasoning_content == "plan" and parsed.content == ""
    assert parsed.tool_calls[0]["function"] == {"name": "search", "arguments": '{"query": "Jaws"}'}
    cut, n_cut, stopped_cut = decode_completion(qwen3_tokenizer, ids[:5], {im_end})
    assert n_cut == 5 and not stopped_cut


def test_config_builds_transformers_backend():
    model = build_chat_model(
        {"backend": "transformers", "model": "offline:tiny-qwen3", "max_tokens": 5, "name": "t"}
    )
    assert isinstance(model, TransformersChatModel) and model.name == "t"
    result = asyncio.run(model.chat([{"role": "user", "content": "hi"}]))
    assert result.usage.completion_tokens <= 5


@pytest.mark.slow
def test_smollm2_real_answers_and_tools(smollm2_chat):
    result = asyncio.run(
        smollm2_chat.chat(
            [{"role": "user", "content": "What is the capital of France?"}],
            sampling=SamplingParams(max_tokens=16),
        )
    )
    assert "Paris" in result.message["content"]
    tok = smollm2_chat.tokenizer
    prompt = render_prompt(tok, [{"role": "user", "content": "What is the capital of France?"}], None, False)
    assert result.usage.prompt_tokens == len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert result.finish_reason == "stop"
    assert (
        result.usage.completion_tokens
        == len(tok(result.message["content"], add_special_tokens=False)["input_ids"]) + 1
    )

    with_tools = asyncio.run(
        smollm2_chat.chat(QUESTION, tools=[SEARCH_TOOL], sampling=SamplingParams(max_tokens=24))
    )
    message = with_tools.message
    assert with_tools.usage.prompt_tokens > result.usage.prompt_tokens + 50  # the tool schema was rendered
    assert (with_tools.finish_reason == "tool_calls") == bool(message.get("tool_calls"))
    assert "<tool_call>" not in message["content"]  # any call the model wrote was parsed out
