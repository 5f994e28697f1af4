"""Collection against flaky OpenAI-compatible endpoints: real HTTP on 127.0.0.1, injected 429/500/timeouts.

Every role is served by `executor_sft.llm.server.create_app` around a scripted synthetic-world
policy and reached through `OpenAIChatModel` (built from `ChatModelConfig`, backend openai). A
middleware fails about 20% of chat calls: 429, 500, or a reply slower than the client timeout.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from fastapi import FastAPI

from executor_sft.llm.config import ChatModelConfig, build_chat_model
from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.rollout import CollectConfig, collect
from executor_sft.store import read_episodes
from executor_sft.synthetic import scripted_models
from tests.support.http_faults import FaultInjector

TIMEOUT_S = 2.0
"""The client's timeout: a healthy reply from the in-process server takes well under it even on a
loaded 2-core machine (at 1 s, one did not, and a resume failed five attempts in a row)."""
RESUME_RETRIES = 8
"""Retries of the resume that must finish everything: far more than the 2 failures `faults()` injects
into one call, so only a host too loaded to answer in time for 7 attempts running could stop it."""
N_QUESTIONS = 8


def faults() -> FaultInjector:
    """~20% of chat calls fail: 7% a 429, 7% a 500, 6% a reply slower than the client's timeout.

    One call (one request body) fails at most twice, so with 4 retries the client always gets
    through on what is injected, and the spare retries absorb a healthy reply that a loaded host
    makes slower than the timeout. Uncapped, a call failed 5 times running once in 3,000
    (0.2**5), which over a run's ~140 calls sank an episode in about one run in 20.
    """
    return FaultInjector(p429=0.07, p500=0.07, p_delay=0.06, delay_s=TIMEOUT_S + 0.5, per_call=2)


@pytest.fixture(scope="module")
def flaky_server(world):
    """One server, one mounted OpenAI-compatible app per role: http://127.0.0.1:PORT/<role>/v1."""
    injector = faults()
    root = injector.install(FastAPI())
    for role, model in scripted_models(world).items():
        root.mount(f"/{role}", create_app(model, served_name=role))
    with BackgroundServer(root) as server:
        yield server, injector


@pytest.fixture
def faults_reset(flaky_server):
    flaky_server[1].reset()
    return flaky_server


def http_models(server: BackgroundServer, max_retries: int) -> dict:
    base = server.base_url.removesuffix("/v1")
    return {
        role: build_chat_model(
            ChatModelConfig(
                backend="openai",
                model=role,
                base_urls=[f"{base}/{role}/v1"],
                timeout_s=TIMEOUT_S,
                max_retries=max_retries,
                backoff_base_s=0.01,
                backoff_max_s=0.05,
                pass_enable_thinking=False,
            )
        )
        for role in ("backbone", "teacher", "student", "answerer", "judge")
    }


def collect_over_http(world_dir, world_bm25, server, max_retries: int, out):
    config = CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": N_QUESTIONS},
            "retriever": {"index": "unused"},
            "output_dir": str(out),
            "concurrency": 8,
        }
    )
    models = http_models(server, max_retries)

    async def go():
        try:
            return await collect(config, models=models, retriever=world_bm25, show_progress=False)
        finally:
            await asyncio.gather(*(m.aclose() for m in models.values()))

    return asyncio.run(go()), models


def recorded_errors(path) -> list[str]:
    """Every failure the records carry: episode errors, executor-run errors, outcome errors."""
    errors = []
    for episode in read_episodes(path):
        assert (episode["stop_reason"] == "error") == (episode["error"] is not None)
        if episode["error"]:
            errors.append(episode["error"])
        for run in episode["runs"]:
            if run["finish"] == "error":
                assert run.get("error"), run["run_id"]
                errors.append(run["error"])
            if run["outcome"] and run["outcome"].get("error"):
                errors.append(run["outcome"]["error"])
    return errors


@pytest.mark.slow
def test_retries_absorb_faults_and_every_episode_is_written(
    world, world_dir, world_bm25, faults_reset, tmp_path
):
    server, faults = faults_reset
    before = Counter(faults.counts)
    result, models = collect_over_http(world_dir, world_bm25, server, max_retries=4, out=tmp_path)
    served = faults.counts - before
    assert result.written == N_QUESTIONS and result.failed == []
    assert served["429"] and served["500"] and served["delay"], served
    retried = sum(e.failures for m in models.values() for e in m.endpoints)
    assert retried >= served["429"] + served["500"] + served["delay"]  # (+ any slow reply on a busy host)
    # 5 attempts each, at most 2 failed on purpose: the records are clean
    assert len(list(read_episodes(result.path))) == N_QUESTIONS
    assert recorded_errors(result.path) == []


@pytest.mark.slow
def test_failures_that_outlast_retries_are_left_for_a_resume_not_stored(
    world, world_dir, world_bm25, faults_reset, tmp_path
):
    server, faults = faults_reset
    result, _ = collect_over_http(world_dir, world_bm25, server, max_retries=0, out=tmp_path)
    # with ~20% failing calls and no retries most episodes fail; none is stored as a finished error
    assert result.failed and result.written + len(result.failed) == N_QUESTIONS
    stored = list(read_episodes(result.path)) if result.path.exists() else []
    assert len(stored) == result.written and (not stored or recorded_errors(result.path) == [])
    attempts = [json.loads(line) for line in (tmp_path / "rollouts.attempts.jsonl").read_text().splitlines()]
    assert sorted(a["episode_id"] for a in attempts) == sorted(eid for eid, _ in result.failed)
    assert all(
        ("HTTP 429" in a["error"]) or ("HTTP 500" in a["error"]) or ("timeout" in a["error"])
        for a in attempts
    )
    again, _ = collect_over_http(world_dir, world_bm25, server, max_retries=RESUME_RETRIES, out=tmp_path)
    assert again.failed == [] and again.written == len(result.failed)
    episodes = list(read_episodes(result.path))
    assert sorted(e["episode_id"] for e in episodes) == sorted({e["episode_id"] for e in episodes})
    assert len(episodes) == N_QUESTIONS and len(recorded_errors(result.path)) <= 1
