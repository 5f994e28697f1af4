"""recipes/build_index.py on a full or read-only disk, or under a file: one line, exit 2, and the
corpus untouched; after a full disk is given room, the same command completes the index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from one_line import one_error_line

from executor_sft.retrieval import Manifest, load_retriever
from tests.support.disks import remount, small_tmpfs
from tests.support.recipes import stderr_tail

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "build_index.py"
pytestmark = pytest.mark.faults


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """3,000 passages: their BM25 index does not fit in 256 KB."""
    rows = (
        {"id": f"d{i}", "contents": f"passage {i} about topic {i} and the words {i * 7} {i % 13}"}
        for i in range(3000)
    )
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build(corpus: Path, output: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(RECIPE), "--corpus", str(corpus), "--output", str(output), "--bm25"]
    return run_script(
        cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300
    )


def test_a_full_disk_is_one_line_and_the_build_completes_once_there_is_room(tmp_path: Path, corpus: Path):
    """Before: numpy's `OSError: 26988 requested and 7136 written` with a traceback."""
    before = corpus.read_bytes()
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        line = one_error_line(build(corpus, disk / "idx"))
        assert line == f"error: {disk / 'idx'}: the disk is full: free some space or choose another output"
        assert not (disk / "idx").exists()
        remount(disk, "size=16m")
        proc = build(corpus, disk / "idx")
        assert proc.returncode == 0, stderr_tail(proc.stderr)
        assert Manifest.load(disk / "idx").kinds == ["bm25"]
        (hits,) = load_retriever(disk / "idx", "bm25").search(["passage 1234 about topic 1234"], 1)
        assert hits[0].doc_id == "d1234"
        assert os.listdir(disk) == ["idx"]  # the stage became the index
    assert corpus.read_bytes() == before


def test_a_read_only_disk_is_one_line_before_anything_is_read(tmp_path: Path, corpus: Path):
    """Before: a traceback from making the stage directory."""
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        remount(disk, "ro")
        line = one_error_line(build(corpus, disk / "idx"))
        assert line == f"error: {disk}: --output: the file system is read-only: choose another output"


def test_an_output_under_a_file_is_one_line(tmp_path: Path, corpus: Path):
    (tmp_path / "afile").write_bytes(b"x\n")
    line = one_error_line(build(corpus, tmp_path / "afile" / "idx"))
    assert line == f"error: {tmp_path / 'afile'}: --output needs a directory here, but it is a file"
    assert (tmp_path / "afile").read_bytes() == b"x\n"


@pytest.mark.slow
def test_ctrl_c_during_a_build_is_one_line_and_the_rerun_completes(tmp_path: Path):
    """A real SIGINT once the build has started: exit 130, one `interrupted:` line, no traceback;
    the output is absent (never half-written) and the same command then builds it."""
    import signal
    import time

    corpus = tmp_path / "big.jsonl"
    with corpus.open("w", encoding="utf-8") as fh:
        for i in range(150_000):
            fh.write(
                json.dumps({"id": f"d{i}", "contents": f"t{i % 97}\npassage {i} words {i * 7} {i % 13}"})
                + "\n"
            )
    output = tmp_path / "index"
    cmd = [sys.executable, str(RECIPE), "--corpus", str(corpus), "--output", str(output), "--bm25"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    start = time.monotonic()
    while (
        not any(tmp_path.glob(".index.partial*")) and proc.poll() is None and time.monotonic() < start + 120
    ):
        time.sleep(0.05)
    at_signal = f"signal sent at {time.monotonic() - start:.1f} s, {signal_state(proc.pid)}"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    ended = f"{at_signal}; the recipe ended at {time.monotonic() - start:.1f} s"
    assert proc.returncode != 0, f"the recipe ran on past Ctrl-C ({ended}):\n{stderr_tail(stderr)}"
    assert proc.returncode == 130, stderr_tail(stderr)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr_tail(stderr)
    assert [line for line in stderr.splitlines() if line.startswith("interrupted:")], stderr_tail(stderr)
    assert not (output / "manifest.json").exists()
    again = build(corpus, output)
    assert again.returncode == 0, stderr_tail(again.stderr)
    assert load_retriever(output, "bm25").search(["passage 12"], 1)[0][0].doc_id == "d12"


def signal_state(pid: int) -> str:
    """How process `pid` treats SIGINT now (from /proc): an ignored or blocked SIGINT explains a
    recipe that runs on past Ctrl-C, which a build that finished first does not."""
    try:
        status = dict(
            line.split(":\t", 1)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if ":\t" in line
        )
    except OSError:
        return "the recipe had already exited"
    bit = 1 << (2 - 1)  # SIGINT is signal 2
    says = {
        name: bool(int(status[field].strip(), 16) & bit)
        for name, field in (("ignored", "SigIgn"), ("blocked", "SigBlk"), ("caught", "SigCgt"))
    }
    return "SIGINT " + ", ".join(f"{name} {value}" for name, value in says.items())
