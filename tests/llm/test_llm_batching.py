"""Micro-batching of concurrent unseeded calls in the transformers backend."""

import asyncio

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.llm import SamplingParams, TransformersChatModel
from tests.support import tiny_qwen3

QUESTIONS = ["Who founded the city?", "When was it built? Give the year only please.", "Capital?"]


def _messages(q: str) -> list[dict]:
    return [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": q}]


def test_concurrent_greedy_calls_share_a_batch_and_match_serial_outputs():
    model, tokenizer = tiny_qwen3(seed=3)
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    serial = TransformersChatModel(model, tokenizer, max_batch_size=1, sampling=greedy)
    batched = TransformersChatModel(model, tokenizer, max_batch_size=8, sampling=greedy)
    calls = []
    original = batched.generate_batch_sync

    def spy(requests, sampling, encoded=None):
        calls.append(len(requests))
        return original(requests, sampling, encoded)

    batched.generate_batch_sync = spy

    async def run(chat_model):
        return await asyncio.gather(*(chat_model.chat(_messages(q), tools=[SEARCH_TOOL]) for q in QUESTIONS))

    expected = asyncio.run(run(serial))
    got = asyncio.run(run(batched))
    assert sum(calls) == len(QUESTIONS) and max(calls) > 1, calls
    for a, b in zip(expected, got, strict=True):
        assert a.message == b.message
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        assert a.usage.completion_tokens == b.usage.completion_tokens


def test_seeded_calls_run_alone():
    model, tokenizer = tiny_qwen3(seed=3)
    chat_model = TransformersChatModel(model, tokenizer, max_batch_size=8)
    sizes = []
    original = chat_model.generate_batch_sync
    chat_model.generate_batch_sync = lambda r, s, e=None: sizes.append(len(r)) or original(r, s, e)
    seeded = SamplingParams(temperature=0.7, max_tokens=6, seed=1)

    async def run():
        return await asyncio.gather(*(chat_model.chat(_messages(q), sampling=seeded) for q in QUESTIONS))

    first, second = asyncio.run(run()), asyncio.run(run())
    assert sizes == [1] * (2 * len(QUESTIONS))  # each call its own generate(), never merged
    assert [r.message for r in first] == [r.message for r in second]


def test_unseeded_sampled_calls_share_a_batch_per_temperature():
    model, tokenizer = tiny_qwen3(seed=3)
    chat_model = TransformersChatModel(model, tokenizer, max_batch_size=8)
    batches = []
    original = chat_model.generate_batch_sync

    def spy(requests, sampling, encoded=None):
        batches.append((len(requests), sampling.temperature))
        return original(requests, sampling, encoded)

    chat_model.generate_batch_sync = spy
    warm, hot = SamplingParams(temperature=0.6, max_tokens=6), SamplingParams(temperature=1.0, max_tokens=6)

    async def run():
        calls = [chat_model.chat(_messages(q), sampling=s) for s in (warm, hot) for q in QUESTIONS * 2]
        return await asyncio.gather(*calls)

    results = asyncio.run(run())
    assert len(results) == 12 and all(r.usage.completion_tokens > 0 for r in results)
    assert sum(n for n, _ in batches) == 12 and max(n for n, _ in batches) > 1, batches
    # Both settings went through the batcher; a batch holds one setting (its key).
    assert {t for _, t in batches} == {0.6, 1.0}
