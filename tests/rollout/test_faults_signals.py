"""Real signals to `recipes/collect_rollouts.py` and `recipes/evaluate.py` running as subprocesses.

SIGTERM to the parent of `num_workers: 2` stops both workers; Ctrl-C (SIGINT, to the process or
to its whole process group as a terminal sends it) prints one line saying what was kept and how
to resume, exit 130, no traceback; the file stays readable and the re-run finishes every episode.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from fault_helpers import (
    Endpoints,
    RetrievalServer,
    alive,
    assert_complete,
    children,
    interrupt,
    lines,
    recipe,
    run_recipe,
    wait_for,
    write_collect_config,
)

pytestmark = pytest.mark.faults
N = 6


@pytest.fixture
def served(world, world_bm25):
    retrieval = RetrievalServer(world_bm25).start()
    try:
        with Endpoints(world) as endpoints:
            yield endpoints, {"url": retrieval.url, "k": 3, "timeout_s": 5.0, "max_retries": 1}
    finally:
        retrieval.stop()


def _finish(proc, timeout: float = 60) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def _part_lines(out: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in out.glob(".rollouts.workers/*/rollouts.jsonl"))


@pytest.mark.slow
def test_sigterm_to_the_parent_stops_both_workers(served, world_dir, tmp_path):
    endpoints, retriever = served
    endpoints.control.delay_s = 0.3  # the workers' share would take them half a minute
    config = write_collect_config(
        tmp_path / "cfg.yaml", world_dir, endpoints.models(), retriever, num_workers=2, limit=2 * N
    )
    out = tmp_path / "out"
    log = (tmp_path / "log").open("w")  # not a pipe: reading one to its end would wait for the workers
    proc = recipe("collect_rollouts.py", "--config", str(config), stdout=log, stderr=log)
    try:
        wait_for(
            lambda: len(children(proc.pid)) >= 2 and _part_lines(out) >= 1, timeout=90, what="workers at work"
        )
        workers = children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        deadline = time.monotonic() + 3
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [w for w in workers if alive(w)] == [], "workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    endpoints.control.delay_s = 0.0
    again = run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_complete(out / "rollouts.jsonl", 2 * N)


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: two spawned workers
def test_ctrl_c_in_collect_keeps_what_finished_and_says_how_to_resume(served, world_dir, tmp_path, workers):
    endpoints, retriever = served
    endpoints.control.delay_s = 0.05
    endpoints.control.then_delay = ("answerer", 1.0)  # the signal lands mid-run however late the poll wakes
    config = write_collect_config(
        tmp_path / "cfg.yaml", world_dir, endpoints.models(), retriever, num_workers=workers, limit=N
    )
    questions = (world_dir / "questions.jsonl").read_bytes()
    out = tmp_path / "out"
    rollouts = out / "rollouts.jsonl"
    proc = recipe("collect_rollouts.py", "--config", str(config), start_new_session=True)
    try:
        wait_for(lambda: len(lines(rollouts)) + _part_lines(out) >= 1, timeout=90, what="a finished episode")
        interrupt(proc, signal.SIGINT, group=True)  # what a terminal's Ctrl-C does
        _, stderr = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    kept = lines(rollouts)
    (line,) = [s for s in stderr.splitlines() if s.startswith("interrupted:")]
    assert line == (
        f"interrupted: {len(kept)} finished episodes are kept in {rollouts}; run the same command again to resume"
    )
    # Seen once in an idle CI run with 2 workers: 0 kept after a part file had held a line. Say
    # where the episodes are if it happens again: still in part files (the next run merges them) or gone.
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert 1 <= len(kept) < N, (
        f"kept {len(kept)}; {_part_lines(out)} lines in part files; files {left}; {stderr[-2000:]}"
    )
    assert assert_complete(rollouts, len(kept))
    endpoints.control.delay_s, endpoints.control.then_delay = 0.0, None
    again = run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_complete(rollouts, N)
    assert (world_dir / "questions.jsonl").read_bytes() == questions


@pytest.mark.slow
def test_ctrl_c_in_evaluate_keeps_what_finished_and_says_how_to_resume(served, world_dir, tmp_path):
    endpoints, retriever = served
    endpoints.control.delay_s = 0.05
    endpoints.control.then_delay = ("answerer", 1.0)
    models = endpoints.models()
    config = {
        "name": "faults",
        "output_dir": str(tmp_path / "eval"),
        "questions": [{"path": str(world_dir / "questions.jsonl"), "limit": N, "limit_per": "source"}],
        "models": {role: models[role] for role in ("backbone", "teacher", "answerer")},
        "pipeline": {"executor_roles": ["teacher"], "driver": "teacher"},
        "retriever": retriever,
        "concurrency": 2,
        "plots": False,
    }
    path = tmp_path / "eval.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    episodes = tmp_path / "eval" / "episodes.jsonl"
    proc = recipe("evaluate.py", "--config", str(path), "--no_progress")
    try:
        wait_for(lambda: len(lines(episodes)) >= 1, timeout=90, what="a finished episode")
        interrupt(proc, signal.SIGINT)
        _, stderr = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    kept = lines(episodes)
    assert f"interrupted: {len(kept)} finished episodes are kept in {episodes}; run the same" in stderr
    endpoints.control.delay_s, endpoints.control.then_delay = 0.0, None
    again = run_recipe("evaluate.py", "--config", str(path), "--no_progress", timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_complete(episodes, N)
