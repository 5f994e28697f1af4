"""The cache of converted offline models under a user's mistakes and a stuck builder (issue 55).

A stopped converter (a real process, SIGSTOPped while it holds the entry's lock) makes a second
loader wait with a message naming it, then give up in one line. A read-only mount holding a
complete entry just works; a cache that is a file, or on a full disk (a real 4 MiB tmpfs), is one
line and exit 2. The loaders are the user's commands, run as subprocesses.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forkserver import run_script

from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[1]
COLLECT = ["recipes/collect_rollouts.py", "--config", "recipes/configs/collect_minibench_offline.yaml"]
LOAD_SMOLLM2 = "from executor_sft.llm.offline import load_offline; load_offline('offline:smollm2')"


def env(cache: Path, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "EXECUTOR_SFT_CACHE": str(cache),
        **more,
    }


def collect(cache: Path, index: Path, out: Path, **more: str) -> subprocess.CompletedProcess:
    return run_script(
        [sys.executable, *COLLECT, "--set", f"retriever.index={index}", "--output_dir", str(out)],
        cwd=REPO, env=env(cache, **more), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [s for s in proc.stderr.splitlines() if s.startswith("error:")]
    assert len(lines) == 1, stderr_tail(proc.stderr)
    return lines[0]


@contextlib.contextmanager
def mounted(*args: str):
    """A real mount (`mount ARGS... target`), unmounted after; skips where this user cannot mount."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind needs root")
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} failed here: {proc.stderr.strip()}")
    try:
        yield Path(args[-1])
    finally:
        subprocess.run(["umount", args[-1]], check=True)


@pytest.mark.slow
def test_a_stopped_converter_makes_a_second_loader_wait_then_say_who_holds_it(tmp_path, minibench_bm25_dir):
    cache = tmp_path / "cache"
    cache.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", LOAD_SMOLLM2], cwd=REPO, env=env(cache))
    try:
        deadline = time.monotonic() + 300
        while not any(p.read_text().startswith("pid ") for p in cache.glob("smollm2-*.lock")):
            assert holder.poll() is None and time.monotonic() < deadline, "the converter never took its lock"
            time.sleep(0.05)
        os.kill(holder.pid, signal.SIGSTOP)
        (lock,) = cache.glob("smollm2-*.lock")
        assert not (cache / lock.name.removesuffix(".lock") / "config.json").exists()
        start = time.monotonic()
        proc = collect(cache, minibench_bm25_dir, tmp_path / "out", EXECUTOR_SFT_CACHE_LOCK_TIMEOUT_S="3")
        wall = time.monotonic() - start
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
    holder_name = f"pid {holder.pid} on {socket.gethostname()}"
    assert f"{lock}: waiting for {holder_name}, which is building this cache entry" in proc.stderr
    assert one_line(proc) == (
        f"error: {lock}: {holder_name} has held this cache lock for over 3 s (building the entry beside it); "
        "if that process is stopped or hung, end it and run again, or set EXECUTOR_SFT_CACHE_LOCK_TIMEOUT_S "
        "to wait longer"
    )
    assert wall < 120


def test_a_read_only_cache_holding_a_complete_entry_just_works(tmp_path, smollm2):
    """`smollm2` (the session's load) made the entry in the suite's cache; mounted read-only here."""
    from tests import support

    target = tmp_path / "ro"
    target.mkdir()
    with mounted("--bind", "-o", "ro", str(support.cache_dir()), str(target)):
        assert not os.access(target, os.W_OK) or subprocess.run(["touch", str(target / "x")]).returncode != 0
        proc = subprocess.run(
            [sys.executable, "-c", LOAD_SMOLLM2], cwd=REPO, env=env(target), capture_output=True, text=True
        )
    assert proc.returncode == 0, stderr_tail(proc.stderr)


def test_a_cache_that_is_a_file_is_one_line_before_anything_is_written(tmp_path, minibench_bm25_dir):
    cache = tmp_path / "cache"
    cache.write_text("not a folder\n")
    proc = collect(cache, minibench_bm25_dir, tmp_path / "out")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, stderr_tail(proc.stderr)
    what = f"{cache}: the cache (EXECUTOR_SFT_CACHE) is a file; point EXECUTOR_SFT_CACHE at a folder"
    assert proc.stderr.splitlines() == [  # the preflight's line for each model the cache would hold
        f"error: recipes/configs/collect_minibench_offline.yaml: models.{role}.model: {what}"
        for role in ("teacher", "student", "answerer")
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_cache_on_a_full_disk_is_one_line(tmp_path, minibench_bm25_dir):
    target = tmp_path / "full"
    target.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(target)):
        proc = collect(target, minibench_bm25_dir, tmp_path / "out")
        line = one_line(proc)
        # no entry that looks complete: the conversion's staging folder is all it left
        assert [p.suffix for p in target.iterdir() if p.is_dir()] in ([], [".tmp"])
    assert line.startswith(f"error: {target}/smollm2-135m-instruct-")
    assert line.endswith(
        ": cannot build this cache entry (No space left on device); free space there, or point "
        "EXECUTOR_SFT_CACHE at a writable folder with room"
    )


def test_an_entry_builds_in_a_fresh_cache_whose_group_folder_is_not_there_yet(tmp_path, monkeypatch):
    """CI's cache is an empty folder: an entry under a group (`sample_data/...`) makes its folder."""
    from executor_sft.cache import cached_entry

    monkeypatch.setenv("EXECUTOR_SFT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    entry = tmp_path / "cache" / "sample_data" / "bm25-0"

    def build() -> None:
        entry.mkdir(parents=True)
        (entry / "done").write_text("1")

    assert cached_entry(entry, entry / "done", build) == entry
    assert (entry / "done").read_text() == "1"
