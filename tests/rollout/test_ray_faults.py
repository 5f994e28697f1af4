"""Ray faults that used to hang or lose the run: an actor stopped mid-task (no heartbeat), more
actors asked for than the cluster holds, and an address where nothing answers. The first two on
the real two-node local cluster (`tests.support.ray_cluster`)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from executor_sft.rollout import CollectConfig, collect
from executor_sft.store import read_episodes
from tests.support.ray_cluster import free_port

pytest.importorskip("ray")

from forkserver import run_script

from tests.support.ray_cluster import BackgroundCollection, world_models, world_retriever  # noqa: E402
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
SCRIPT = {"noise": 0.2, "teacher_extra_search_rate": 0.3}


def _config(world_dir: Path, out: Path, ray: dict) -> CollectConfig:
    return CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 24},
            "retriever": {"index": "unused-a-retriever-is-passed"},
            "output_dir": str(out),
            "concurrency": 4,
            "samples_per_question": 2,
            "engine": "ray",
            "ray": ray,
        }
    )


def _ids(path: Path) -> list[str]:
    return [r["episode_id"] for r in read_episodes(path)] if path.exists() else []


def _actor_pids(node) -> list[int]:
    """The episode actors' worker processes of one node (its process group)."""
    out = subprocess.run(["pgrep", "-g", str(node.pid), "-f", "EpisodeActor"], capture_output=True, text=True)
    return [int(pid) for pid in out.stdout.split()]


@pytest.mark.slow
def test_a_stopped_actor_misses_its_heartbeat_and_its_task_goes_to_the_other(
    ray_cluster, world_dir, tmp_path
):
    config = _config(world_dir, tmp_path / "stopped", {"heartbeat_s": 8.0, "start_timeout_s": 10.0})
    victim = ray_cluster.nodes[-1]
    run = BackgroundCollection(config, str(world_dir), **SCRIPT)
    run.wait_until(lambda: run.written() >= 8 and _actor_pids(victim))
    stopped = _actor_pids(victim)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        run.thread.join(timeout=180)
        assert not run.thread.is_alive(), "the driver waited on the stopped actor"
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    result = run.result
    ids = _ids(config.rollouts_path)
    expected = {item.episode_id for item in config.work_items(_questions(config))}
    assert Counter(ids).most_common(1)[0][1] == 1 and set(ids) == expected
    assert result.summary["lost_actors"] == 1 and result.summary["requeued"] > 0
    assert not result.failed and not result.not_started


@pytest.mark.slow
def test_more_actors_than_the_cluster_holds_start_the_ones_that_fit(ray_cluster, world_dir, tmp_path, caplog):
    config = _config(world_dir, tmp_path / "many", {"actors": 5})
    models = functools.partial(world_models, str(world_dir), **SCRIPT)
    retriever = functools.partial(world_retriever, str(world_dir))
    with caplog.at_level(logging.WARNING, logger="executor_sft.ray_runner"):
        result = asyncio.run(collect(config, models=models, retriever=retriever, show_progress=False))
    assert result.summary["actors"] == 2 and result.written == 48 and not result.not_started
    assert "5 actors asked for, the cluster's 2 CPUs hold 2" in caplog.text


def _questions(config: CollectConfig):
    from executor_sft.rollout import select_questions

    return select_questions(config)


def test_an_address_where_nothing_answers_is_one_line_within_seconds(world_index, tmp_path):
    cfg = tmp_path / "collect.yaml"
    cfg.write_text(
        f"""questions: {{path: {REPO / "data" / "world" / "questions.jsonl"}, limit: 2}}
retriever: {{index: {world_index}}}
models:
  backbone: {{backend: transformers, model: "offline:tiny-qwen3"}}
  teacher: {{backend: transformers, model: "offline:tiny-qwen3"}}
  student: {{backend: transformers, model: "offline:tiny-qwen3"}}
  answerer: {{backend: transformers, model: "offline:tiny-qwen3"}}
engine: ray
ray: {{address: "127.0.0.1:{free_port()}"}}
output_dir: {tmp_path / "out"}
""",
        encoding="utf-8",
    )
    start = time.monotonic()
    proc = run_script(
        [sys.executable, str(REPO / "recipes" / "collect_rollouts.py"), "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert time.monotonic() - start < 30
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ray.address 127.0.0.1:") and "nothing answers there" in lines[-1]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "rollouts.jsonl").exists()
