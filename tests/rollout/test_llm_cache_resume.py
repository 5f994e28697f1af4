"""A resumed collection sends no greedy request twice: the request cache beside the rollouts replays them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter

import pytest

from executor_sft.rollout import CollectConfig, collect
from executor_sft.store import read_episodes
from executor_sft.synthetic import scripted_models

ROLES = ("backbone", "answerer", "teacher", "student")


class Counting:
    """A scripted role that records every request that reaches it."""

    def __init__(self, inner, sent: list):
        self.inner, self.name, self.sent = inner, inner.name, sent

    async def chat(self, messages, tools=None, sampling=None):
        sampling_json = dataclasses.asdict(sampling) if sampling else None
        self.sent.append(json.dumps([self.name, messages, tools, sampling_json], sort_keys=True))
        return await self.inner.chat(messages, tools, sampling)


@pytest.fixture
def sent(world, monkeypatch) -> list[str]:
    """Models built from the config (`CollectConfig.runtime`) are counting scripted doubles."""
    requests: list[str] = []
    doubles = {role: Counting(model, requests) for role, model in scripted_models(world).items()}
    monkeypatch.setattr("executor_sft.llm.pool.build_chat_model", lambda cfg: doubles[cfg.model])
    return requests


def config(world_dir, out, limit, **kwargs) -> CollectConfig:
    return CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": limit},
            "retriever": {"index": "unused-a-retriever-is-passed"},
            "models": {role: {"model": role} for role in ROLES},
            "output_dir": str(out),
            "concurrency": 4,
            **kwargs,
        }
    )


def collect_now(cfg, retriever):
    return asyncio.run(collect(cfg, retriever=retriever, show_progress=False))


def answers(path) -> dict[str, list]:
    return {
        e["episode_id"]: [e["answer"], [(r["run_id"], r["messages"]) for r in e["runs"]]]
        for e in read_episodes(path)
    }


def test_killed_and_resumed_collection_repeats_no_greedy_call(world_dir, world_bm25, tmp_path, sent):
    first = collect_now(config(world_dir, tmp_path, 4), world_bm25)
    assert first.written == 4 and sent
    n_first = len(sent)
    cache = tmp_path / "rollouts.llm_cache.jsonl"
    assert len(cache.read_text(encoding="utf-8").splitlines()) == n_first
    before = answers(first.path)

    # killed: two finished episodes never reached the file, and the cache writer died mid-line
    lines = first.path.read_text(encoding="utf-8").splitlines(keepends=True)
    first.path.write_text("".join(lines[:2]), encoding="utf-8")
    with cache.open("a", encoding="utf-8") as fh:
        fh.write('{"key": "0123", "result": {"message": {"ro')

    # resumed, with two more questions than before
    resumed = collect_now(config(world_dir, tmp_path, 6), world_bm25)
    assert (resumed.written, resumed.skipped) == (4, 2)
    new_calls = sent[n_first:]
    assert new_calls, "the two new questions need calls"
    assert len(sent) == len(set(sent)), "a request was sent twice"
    after = answers(first.path)
    assert {k: after[k] for k in before} == before  # the redone episodes replayed the same answers

    # first run + resume sent exactly what one uninterrupted run of the six questions sends
    total = list(sent)
    sent.clear()
    collect_now(config(world_dir, tmp_path / "uninterrupted", 6), world_bm25)
    assert Counter(total) == Counter(sent)

    # everything again from scratch, with the cache: no call at all
    sent.clear()
    first.path.unlink()
    again = collect_now(config(world_dir, tmp_path, 6), world_bm25)
    assert again.written == 6 and sent == []


def test_cache_off_sends_every_request_again(world_dir, world_bm25, tmp_path, sent):
    collect_now(config(world_dir, tmp_path, 2, llm_cache=False), world_bm25)
    n = len(sent)
    (tmp_path / "rollouts.jsonl").unlink()
    collect_now(config(world_dir, tmp_path, 2, llm_cache=False), world_bm25)
    assert len(sent) == 2 * n
    assert not (tmp_path / "rollouts.llm_cache.jsonl").exists()
