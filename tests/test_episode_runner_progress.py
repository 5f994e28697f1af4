"""Progress that moves while an episode is still running: model calls are counted as they finish
and a heartbeat redraws the bar (or logs a line) long before the first episode is done."""

from __future__ import annotations

import asyncio
import io
import logging
import time

from executor_sft.agents.calls import call_model
from executor_sft.episode_runner import WorkItem, run_episodes, work_items
from executor_sft.schema import Episode, Question
from executor_sft.store import EpisodeStore
from tests.support.doubles import ScriptedChatModel

QUESTIONS = [Question(id=f"q{i}", question=f"question {i}?", golden_answers=["a"]) for i in range(2)]
CALLS_PER_EPISODE = 4
LATENCY_S = 0.25


def _slow_episodes(model: ScriptedChatModel):
    """Each episode makes CALLS_PER_EPISODE real `call_model` calls to a model that takes LATENCY_S each."""

    async def run_one(item: WorkItem) -> Episode:
        for turn in range(CALLS_PER_EPISODE):
            await call_model(model, [{"role": "user", "content": f"{item.question.question} turn {turn}"}])
        return Episode(episode_id=item.episode_id, question=item.question, sample_index=item.sample)

    return run_one


def test_the_bar_shows_model_calls_before_any_episode_finishes(tmp_path):
    model = ScriptedChatModel(default="thinking...", latency_s=LATENCY_S)
    screen = io.StringIO()
    start = time.monotonic()
    with EpisodeStore(tmp_path / "episodes.jsonl") as store:
        report = asyncio.run(
            run_episodes(
                work_items(QUESTIONS, 1),
                _slow_episodes(model),
                store,
                concurrency=1,
                progress={"file": screen, "mininterval": 0, "desc": "episodes"},
                heartbeat_s=0.1,
            )
        )
    assert time.monotonic() - start < 30
    assert report.written == 2
    frames = screen.getvalue().split("\r")
    # While the bar still says 0/2, the heartbeat has shown calls ticking up.
    before_first = [f for f in frames if " 0/2 " in f]
    shown = {int(f.split("calls=")[1].split(",")[0]) for f in before_first if "calls=" in f}
    assert {1, 2, 3} <= shown, before_first[-3:]
    last = next(f for f in reversed(frames) if "calls=" in f)
    assert " 2/2 " in last and "calls=8," in last and "tok=" in last


def test_without_a_bar_the_heartbeat_is_a_log_line(tmp_path, caplog):
    model = ScriptedChatModel(default="thinking...", latency_s=LATENCY_S)
    with (
        caplog.at_level(logging.INFO, logger="executor_sft.episode_runner"),
        EpisodeStore(tmp_path / "episodes.jsonl") as store,
    ):
        items = work_items(QUESTIONS[:1], 1)
        asyncio.run(run_episodes(items, _slow_episodes(model), store, concurrency=1, heartbeat_s=0.1))
    beats = [r.getMessage() for r in caplog.records if "model calls" in r.getMessage()]
    assert beats and beats[0].startswith("0/1 episodes, ")
    assert any(b.startswith("0/1 episodes, 2 model calls") for b in beats), beats
