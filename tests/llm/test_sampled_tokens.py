"""Backends keep the token ids they sampled: transformers always, OpenAI-compatible servers on request."""

from __future__ import annotations

import asyncio

import pytest
import torch
from llm_helpers import completion, raw_app

from executor_sft.agents import run_executor
from executor_sft.agents.calls import call_model
from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.filters.pipeline import sampled_tokens_of
from executor_sft.llm import OpenAIChatModel, SamplingParams, TransformersChatModel
from executor_sft.llm.request_cache import RequestCache
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.llm.transformers_backend import render_prompt
from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.schema import ExecutorRun

QUESTION = [
    {"role": "system", "content": "You are a search agent."},
    {"role": "user", "content": "Who directed Jaws?"},
]


class FixedRetriever(Retriever):
    index_id = "fixed"

    def search(self, queries, k):
        return [[Hit(f"d{i}", f"T{i}", f"Passage {i} on {q}.", 1.0) for i in range(k)] for q in queries]


@pytest.fixture(scope="module")
def tiny_chat():
    from tests.support import tiny_qwen3

    model, tokenizer = tiny_qwen3()
    return TransformersChatModel(model, tokenizer, name="tiny", max_batch_size=1)


def test_transformers_result_holds_the_generated_ids(tiny_chat):
    tok, model = tiny_chat.tokenizer, tiny_chat.model
    result = asyncio.run(
        tiny_chat.chat(QUESTION, tools=[SEARCH_TOOL], sampling=SamplingParams(max_tokens=12))
    )
    sampled = result.sampled_tokens
    assert sampled is not None and sampled.vocabulary == vocabulary_id(tok)
    assert len(sampled.ids) == result.usage.completion_tokens

    # The same greedy generation, by hand: the stored ids are what generate() produced.
    prompt = render_prompt(tok, QUESTION, [SEARCH_TOOL], enable_thinking=False)
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(
            **enc, max_new_tokens=12, do_sample=False, eos_token_id=sorted(tiny_chat.stop_ids),
            pad_token_id=tok.pad_token_id, temperature=None, top_p=None, top_k=None,
        )  # fmt: skip
    assert sampled.ids == out[0, enc["input_ids"].shape[1] :].tolist()[: len(sampled.ids)]
    assert result.record(QUESTION).sampled_tokens == sampled


def test_executor_run_keeps_one_id_list_per_assistant_turn(tiny_chat):
    run = asyncio.run(
        run_executor(
            tiny_chat,
            FixedRetriever(),
            "Who directed Jaws?",
            max_turns=2,
            sampling=SamplingParams(max_tokens=8),
        )
    )
    assistants = [m for m in run.messages if m["role"] == "assistant"]
    assert assistants and all("sampled_tokens" in call for call in run.calls)
    again = ExecutorRun.from_json(run.to_json())
    per_turn = sampled_tokens_of(again.calls, again.messages)
    assert per_turn is not None and len(per_turn) == len(assistants)
    assert [len(t["ids"]) for t in per_turn] == [c["usage"]["completion_tokens"] for c in run.calls]


def test_openai_backend_asks_for_token_ids_only_when_configured(tiny_chat):
    """Against our server (which honours vLLM's `return_token_ids`) serving the tiny model."""
    tok = tiny_chat.tokenizer
    direct = tiny_chat.generate_sync(QUESTION, None, SamplingParams(max_tokens=10))
    with BackgroundServer(create_app(tiny_chat)) as server:
        asking = OpenAIChatModel("tiny", server.base_url, tokenizer=tok, return_token_ids=True)
        plain = OpenAIChatModel("tiny", server.base_url)
        got = asyncio.run(asking.chat(QUESTION, sampling=SamplingParams(max_tokens=10)))
        without = asyncio.run(plain.chat(QUESTION, sampling=SamplingParams(max_tokens=10)))
    assert got.sampled_tokens is not None and got.sampled_tokens.ids == direct.sampled_tokens.ids
    assert got.sampled_tokens.vocabulary == vocabulary_id(tok)
    assert without.sampled_tokens is None


def test_openai_backend_reads_vllms_choice_token_ids():
    """vLLM's shape: the request carries `return_token_ids`, the choice `token_ids`; no tokenizer, no vocabulary."""

    def answer(body, _request):
        reply = completion({"content": "Spielberg"})
        if body.get("return_token_ids"):
            reply["choices"][0]["token_ids"] = [11, 12, 13]
        return reply

    app = raw_app(answer)
    with BackgroundServer(app) as server:
        result = asyncio.run(OpenAIChatModel("raw", server.base_url, return_token_ids=True).chat(QUESTION))
    assert app.state.bodies[0]["return_token_ids"] is True
    assert result.sampled_tokens.ids == [11, 12, 13] and result.sampled_tokens.vocabulary is None


def test_request_cache_returns_the_stored_ids(tiny_chat, tmp_path):
    path = tmp_path / "cache.jsonl"

    async def ask(cache: RequestCache):
        with cache.cover({"executor": tiny_chat}).in_use():
            return (await call_model(tiny_chat, QUESTION)).record

    first = asyncio.run(ask(RequestCache(path)))
    cached = RequestCache(path)
    again = asyncio.run(ask(cached))
    assert cached.hits == 1
    assert first.sampled_tokens is not None and again.sampled_tokens == first.sampled_tokens
