"""A failure is not a result: outages of the backbone endpoint, of the retrieval server and of the
request cache's disk, injected for real while `recipes/collect_rollouts.py` runs as a subprocess.

Each case: the run that meets the fault exits 1 with one `error:` line saying how many episodes
are unfinished and how to resume; nothing it stored is an error; the inputs are byte-identical;
and the plain re-run, once the fault is gone, brings every episode to a non-error finish.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from fault_helpers import (
    Endpoints,
    RetrievalServer,
    assert_complete,
    error_lines,
    lines,
    run_recipe,
    wait_for,
    write_collect_config,
)

from tests.support.recipes import stderr_tail

N = 6
pytestmark = pytest.mark.faults


def _inputs(*paths: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in paths}


def _check_unfinished(proc: subprocess.CompletedProcess, rollouts: Path) -> list[dict]:
    """The run that met the fault: exit 1, one line naming what is left; what it stored is clean."""
    assert proc.returncode == 1, stderr_tail(proc.stderr)
    (line,) = error_lines(proc.stderr)
    stored = lines(rollouts)
    assert f"{rollouts}: {N - len(stored)} episodes unfinished" in line
    assert "run the same command again to resume" in line
    assert "Traceback" not in proc.stderr
    assert len(stored) < N
    assert_complete(rollouts, len(stored))  # no episode stored as a finished error
    return stored


def _collect(config: Path) -> subprocess.CompletedProcess:
    return run_recipe("collect_rollouts.py", "--config", str(config), timeout=180)


@pytest.fixture
def retrieval(world_bm25):
    server = RetrievalServer(world_bm25).start()
    yield server
    server.stop()


def _retriever(server: RetrievalServer) -> dict:
    return {"url": server.url, "k": 3, "timeout_s": 5.0, "max_retries": 1}


def test_backbone_outage_mid_run_then_a_resume_finishes_every_episode(world, world_dir, retrieval, tmp_path):
    with Endpoints(world) as endpoints:
        config = write_collect_config(
            tmp_path / "cfg.yaml", world_dir, endpoints.models(), _retriever(retrieval)
        )
        inputs = _inputs(config, world_dir / "questions.jsonl")
        control = endpoints.control

        def outage():  # the endpoint goes down after a few answers and stays down for the run
            wait_for(lambda: control.served["backbone"] >= 3, what="backbone calls")
            control.down.add("backbone")

        threading.Thread(target=outage, daemon=True).start()
        first = _collect(config)
        rollouts = tmp_path / "out" / "rollouts.jsonl"
        _check_unfinished(first, rollouts)
        assert control.served["backbone:500"] >= 2
        attempts = lines(tmp_path / "out" / "rollouts.attempts.jsonl")
        assert attempts and all("HTTP 500" in a["error"] for a in attempts)

        control.down.clear()
        second = _collect(config)
        assert second.returncode == 0, stderr_tail(second.stderr)
        assert error_lines(second.stderr) == []
        assert_complete(rollouts, N)
    assert _inputs(*inputs) == inputs


@pytest.mark.slow
def test_retrieval_server_stopped_mid_run_then_a_resume_finishes_every_episode(
    world, world_dir, retrieval, tmp_path
):
    with Endpoints(world) as endpoints:
        config = write_collect_config(
            tmp_path / "cfg.yaml", world_dir, endpoints.models(), _retriever(retrieval)
        )
        inputs = _inputs(config, world_dir / "questions.jsonl")

        def outage():  # a real stop: connections are refused until the server is started again
            wait_for(lambda: retrieval.requests >= 3, what="retrieval requests")
            retrieval.stop()

        threading.Thread(target=outage, daemon=True).start()
        first = _collect(config)
        rollouts = tmp_path / "out" / "rollouts.jsonl"
        _check_unfinished(first, rollouts)
        assert any(
            "RetrievalError" in a["error"] for a in lines(tmp_path / "out" / "rollouts.attempts.jsonl")
        )

        back = retrieval.restart()
        try:
            second = _collect(config)
        finally:
            back.stop()
        assert second.returncode == 0, stderr_tail(second.stderr)
        assert_complete(rollouts, N)
    assert _inputs(*inputs) == inputs


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (the request cache's disk); skipped where mounting is not allowed."""
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_request_cache_disk_full_stores_no_error_and_a_resume_with_space_finishes(
    world, world_dir, retrieval, small_disk, tmp_path
):
    filler = small_disk / "filler"
    filler.write_bytes(b"x" * (256 * 1024 - 24 * 1024))  # about 24 KiB left for the cache
    with Endpoints(world) as endpoints:
        config = write_collect_config(
            tmp_path / "cfg.yaml",
            world_dir,
            endpoints.models(),
            _retriever(retrieval),
            llm_cache_path=str(small_disk / "llm_cache.jsonl"),
        )
        inputs = _inputs(config, world_dir / "questions.jsonl")
        first = _collect(config)
        rollouts = tmp_path / "out" / "rollouts.jsonl"
        _check_unfinished(first, rollouts)
        attempts = lines(tmp_path / "out" / "rollouts.attempts.jsonl")
        assert attempts and all("No space left on device" in a["error"] for a in attempts)

        filler.unlink()  # another process frees the disk
        second = _collect(config)
        assert second.returncode == 0, stderr_tail(second.stderr)
        assert_complete(rollouts, N)
    assert _inputs(*inputs) == inputs
