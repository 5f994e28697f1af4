"""Thinking end to end: an OpenAI-compatible server returns `reasoning_content` -> collection ->
filter -> SFT row -> the think block is trained with `enable_thinking` and never without it."""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi import FastAPI

from executor_sft.filters import FilterConfig, filter_episodes, iter_jsonl
from executor_sft.llm.config import ChatModelConfig, build_chat_model
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.rollout import CollectConfig, collect
from executor_sft.schema import Role
from executor_sft.sft import IGNORE_INDEX, tokenize_example
from executor_sft.synthetic import scripted_models


class Thinking:
    """Adds a reasoning trace to every reply of a scripted policy (as a reasoning server would)."""

    def __init__(self, inner, name: str):
        self.inner, self.name = inner, name

    async def chat(self, messages, tools=None, sampling=None):
        result = await self.inner.chat(messages, tools, sampling)
        turn = sum(m.get("role") == "assistant" for m in messages) + 1
        message = {**result.message, "reasoning_content": f"Turn {turn}: which passage names the entity?"}
        return dataclasses.replace(result, message=message)


def _collect_over_http(world, world_dir, world_bm25, out):
    models = scripted_models(world)
    root = FastAPI()
    for role, model in models.items():
        served = Thinking(model, role) if role in (Role.TEACHER, Role.STUDENT) else model
        root.mount(f"/{role}", create_app(served, served_name=role))
    config = CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 4},
            "retriever": {"index": "unused"},
            "output_dir": str(out),
        }
    )
    with BackgroundServer(root) as server:
        base = server.base_url.removesuffix("/v1")
        http = {
            role: build_chat_model(
                ChatModelConfig(
                    backend="openai", model=role, base_urls=[f"{base}/{role}/v1"], pass_enable_thinking=False
                )
            )
            for role in models
        }

        async def go():
            try:
                return await collect(config, models=http, retriever=world_bm25, show_progress=False)
            finally:
                await asyncio.gather(*(m.aclose() for m in http.values()))

        asyncio.run(go())
    return config.rollouts_path


def test_reasoning_from_a_server_reaches_a_trained_think_block(
    world, world_dir, world_bm25, tmp_path, qwen3_tokenizer
):
    rollouts = _collect_over_http(world, world_dir, world_bm25, tmp_path)
    rows = filter_episodes(iter_jsonl(rollouts), FilterConfig()).rows
    assert rows
    row = next(r for r in rows if any(m.get("reasoning_content") for m in r["messages"]))
    trace = next(m["reasoning_content"] for m in row["messages"] if m.get("reasoning_content"))
    assert trace.startswith("Turn 1:")

    def trained_text(enable_thinking: bool) -> tuple[str, str]:
        example = tokenize_example(row, qwen3_tokenizer, enable_thinking=enable_thinking)
        ids, labels = example["input_ids"], example["labels"]
        trained = [t for t, lab in zip(ids, labels, strict=True) if lab != IGNORE_INDEX]
        return qwen3_tokenizer.decode(ids), qwen3_tokenizer.decode(trained)

    text, trained = trained_text(True)
    assert f"<think>\n{trace}\n</think>" in text and trace in trained and "<think>" in trained
    text, trained = trained_text(False)
    assert trace not in text and trace not in trained and "<think>" not in trained
    # A filter that drops reasoning gives rows without it.
    plain = filter_episodes(iter_jsonl(rollouts), FilterConfig(keep_reasoning=False)).rows
    assert not any(m.get("reasoning_content") for r in plain for m in r["messages"])
