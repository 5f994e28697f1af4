"""A collection process killed with SIGKILL at several points resumes to exactly the planned episodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict

import pytest
from forkserver import run_script

from tests.support.recipes import stderr_tail

QUESTIONS, SAMPLES = 12, 2

COLLECTOR = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path

    from executor_sft.retrieval import BM25Retriever, load_corpus
    from executor_sft.rollout import CollectConfig, collect
    from executor_sft.synthetic import load_world, scripted_models


    class Slow:
        '''A scripted role behind a fixed network-like latency, so a kill lands mid-collection.'''

        def __init__(self, inner, latency_s):
            self.inner, self.latency_s, self.name = inner, latency_s, inner.name

        async def chat(self, messages, tools=None, sampling=None):
            await asyncio.sleep(self.latency_s)
            return await self.inner.chat(messages, tools, sampling)


    world_dir, out, limit, samples = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    world = load_world(world_dir)
    retriever = BM25Retriever.build(load_corpus(world_dir / "corpus.jsonl"))
    models = {role: Slow(model, 0.01) for role, model in scripted_models(world).items()}
    config = CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": limit},
            "retriever": {"index": "unused"},
            "output_dir": out,
            "samples_per_question": samples,
            "concurrency": 3,
        }
    )
    print("START", flush=True)
    result = asyncio.run(collect(config, models=models, retriever=retriever, show_progress=False))
    print("DONE", result.written, result.skipped, len(result.failed), flush=True)
    """
)


def complete_lines(path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.slow
def test_sigkill_at_several_points_then_resume(world_dir, tmp_path):
    script = tmp_path / "collector.py"
    script.write_text(COLLECTOR)
    out = tmp_path / "out"
    rollouts = out / "rollouts.jsonl"
    cmd = [sys.executable, str(script), str(world_dir), str(out), str(QUESTIONS), str(SAMPLES)]
    total = QUESTIONS * SAMPLES
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    for kill_after in (1, 5, 12):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 120
        while complete_lines(rollouts) < kill_after:
            assert proc.poll() is None, (
                f"collector exited before {kill_after} episodes: {proc.stderr.read()[-2000:]}"
            )
            assert time.monotonic() < deadline, "collector made no progress"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        assert kill_after <= complete_lines(rollouts) < total, "the kill must land mid-collection"

    done = run_script(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, stderr_tail(done.stderr)
    written, skipped, failed = map(int, done.stdout.split("DONE")[1].split())
    assert failed == 0 and written + skipped == total and skipped >= 12

    raw = rollouts.read_bytes()
    assert raw.endswith(b"\n")
    records = [json.loads(line) for line in raw.decode("utf-8").splitlines()]  # every line is valid JSON
    ids = [r["episode_id"] for r in records]
    assert len(ids) == len(set(ids)) == total
    per_question = defaultdict(set)
    for r in records:
        per_question[r["question"]["id"]].add(r["sample_index"])
    assert len(per_question) == QUESTIONS
    assert all(samples == set(range(SAMPLES)) for samples in per_question.values())
