"""Real signals to `recipes/collect_rollouts.py` and `recipes/evaluate.py` running as subprocesses.

SIGTERM prints one line saying what was kept and dies of the signal; Ctrl-C (SIGINT, to the
process or to its whole process group as a terminal sends it) prints one line saying what was
kept and how to resume, exit 130, no traceback; the file stays readable and the re-run finishes
every episode.
"""

from __future__ import annotations

import json
import signal

import pytest
from fault_helpers import (
    Endpoints,
    RetrievalServer,
    assert_complete,
    interrupt,
    lines,
    recipe,
    run_recipe,
    wait_for,
    write_collect_config,
)

from tests.support.recipes import stderr_tail

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


@pytest.mark.slow
def test_sigterm_says_what_was_kept_and_the_rerun_finishes(served, world_dir, tmp_path):
    endpoints, retriever = served
    endpoints.control.delay_s = 0.3
    config = write_collect_config(
        tmp_path / "cfg.yaml", world_dir, endpoints.models(), retriever, limit=2 * N
    )
    rollouts = tmp_path / "out" / "rollouts.jsonl"
    proc = recipe("collect_rollouts.py", "--config", str(config))
    try:
        wait_for(lambda: len(lines(rollouts)) >= 1, timeout=90, what="a finished episode")
        proc.send_signal(signal.SIGTERM)
        _, stderr = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM
    # the progress bar's last redraw may share the line (tqdm ends its redraws with "\r", not "\n")
    (line,) = [
        s[s.index("terminated (SIGTERM):") :] for s in stderr.splitlines() if "terminated (SIGTERM):" in s
    ]
    assert f"finished episodes are kept in {rollouts}; run the same command again to resume" in line
    endpoints.control.delay_s = 0.0
    again = run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)
    assert again.returncode == 0, stderr_tail(again.stderr)
    assert_complete(rollouts, 2 * N)


def test_ctrl_c_in_collect_keeps_what_finished_and_says_how_to_resume(served, world_dir, tmp_path):
    endpoints, retriever = served
    endpoints.control.delay_s = 0.05
    endpoints.control.then_delay = ("answerer", 1.0)  # the signal lands mid-run however late the poll wakes
    config = write_collect_config(tmp_path / "cfg.yaml", world_dir, endpoints.models(), retriever, limit=N)
    questions = (world_dir / "questions.jsonl").read_bytes()
    out = tmp_path / "out"
    rollouts = out / "rollouts.jsonl"
    proc = recipe("collect_rollouts.py", "--config", str(config), start_new_session=True)
    try:
        wait_for(lambda: len(lines(rollouts)) >= 1, timeout=90, what="a finished episode")
        interrupt(proc, signal.SIGINT, group=True)  # what a terminal's Ctrl-C does
        _, stderr = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr_tail(stderr)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    kept = lines(rollouts)
    (line,) = [s for s in stderr.splitlines() if s.startswith("interrupted:")]
    assert line == (
        f"interrupted: {len(kept)} finished episodes are kept in {rollouts}; run the same command again to resume"
    )
    assert 1 <= len(kept) < N, f"kept {len(kept)}; {stderr_tail(stderr)}"
    assert assert_complete(rollouts, len(kept))
    endpoints.control.delay_s, endpoints.control.then_delay = 0.0, None
    again = run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)
    assert again.returncode == 0, stderr_tail(again.stderr)
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
    assert proc.returncode == 130, stderr_tail(stderr)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    kept = lines(episodes)
    assert f"interrupted: {len(kept)} finished episodes are kept in {episodes}; run the same" in stderr
    endpoints.control.delay_s, endpoints.control.then_delay = 0.0, None
    again = run_recipe("evaluate.py", "--config", str(path), "--no_progress", timeout=180)
    assert again.returncode == 0, stderr_tail(again.stderr)
    assert_complete(episodes, N)
