"""The filter's outputs are the user's: devices, FIFOs and symlinks are written through, a full or
read-only disk and a directory in a file's place are one line, and a SIGTERM leaves no temporary.

recipes/filter_trajectories.py runs as a subprocess on the project's data/rollouts.jsonl; each
case checks the exit status, the `error:` line, the input byte-identical and what is left on disk.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from forkserver import run_script
from one_line import one_error_line

from tests.support.disks import remount, small_tmpfs
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
ROLLOUTS = REPO / "data" / "rollouts.jsonl"
pytestmark = pytest.mark.faults


def filter_cmd(rollouts: Path, output: Path, report: Path | None = None) -> list[str]:
    cmd = [sys.executable, str(REPO / "recipes/filter_trajectories.py"), "--rollouts", str(rollouts)]
    return [*cmd, "--output", str(output), *(["--report", str(report)] if report else [])]


def run_filter(rollouts: Path, output: Path, report: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_script(
        filter_cmd(rollouts, output, report), cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The rows and report of a plain run into regular files."""
    out = tmp_path_factory.mktemp("plain")
    proc = run_filter(ROLLOUTS, out / "sft.jsonl", out / "report.json")
    assert proc.returncode == 0, proc.stderr
    return {"rows": (out / "sft.jsonl").read_bytes(), "report": (out / "report.json").read_bytes()}


def test_a_device_and_a_fifo_are_written_through_never_replaced(tmp_path: Path, expected) -> None:
    """Before: the rename replaced /dev/null with a 215 KB regular file. The device here is a
    node of /dev/null's own numbers (1, 3) in tmp_path, so a regression cannot destroy /dev/null."""
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot make a device node here (needs root)")
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    proc = run_filter(ROLLOUTS, null, fifo)
    reader.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(null.stat().st_mode) and null.stat().st_rdev == os.makedev(1, 3)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert received == [expected["report"]]
    assert sorted(os.listdir(tmp_path)) == ["null", "report.fifo"]


def test_a_symlinked_output_stays_a_link_and_its_target_gets_the_content(tmp_path: Path, expected) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "sft.jsonl").write_bytes(b"old rows\n")
    (tmp_path / "sft.jsonl").symlink_to(tmp_path / "real" / "sft.jsonl")
    (tmp_path / "report.json").symlink_to(tmp_path / "real" / "report.json")  # dangling until written
    proc = run_filter(ROLLOUTS, tmp_path / "sft.jsonl", tmp_path / "report.json")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sft.jsonl").is_symlink() and (tmp_path / "report.json").is_symlink()
    assert (tmp_path / "real" / "sft.jsonl").read_bytes() == expected["rows"]
    assert (tmp_path / "real" / "report.json").read_bytes() == expected["report"]
    assert sorted(os.listdir(tmp_path / "real")) == ["report.json", "sft.jsonl"]


def test_a_report_that_is_a_directory_fails_before_the_rows_are_written(tmp_path: Path) -> None:
    """Before: sft.jsonl was written, then a traceback and exit 1."""
    (tmp_path / "report").mkdir()
    line = one_error_line(run_filter(ROLLOUTS, tmp_path / "sft.jsonl", tmp_path / "report"))
    assert line == f"error: {tmp_path / 'report'}: --report is a directory: name a file; nothing written"
    assert sorted(os.listdir(tmp_path)) == ["report"]


def test_an_output_under_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_bytes(b"x\n")
    line = one_error_line(run_filter(ROLLOUTS, tmp_path / "afile" / "sft.jsonl"))
    assert line.startswith(f"error: {tmp_path / 'afile'}: --output needs a directory here, but it is a file")
    assert (tmp_path / "afile").read_bytes() == b"x\n"


def test_a_full_disk_keeps_the_previous_output_then_a_rerun_with_room_writes_it(tmp_path: Path, expected):
    """Before: a traceback. The rows (215 KB) do not fit in 128 KB beside the previous output."""
    before = ROLLOUTS.read_bytes()
    with small_tmpfs(tmp_path / "disk", "128k") as disk:
        (disk / "sft.jsonl").write_bytes(b"previous rows\n")
        line = one_error_line(run_filter(ROLLOUTS, disk / "sft.jsonl", disk / "report.json"))
        assert line == (
            f"error: {disk / 'sft.jsonl'}: the disk is full: free some space or choose another output; "
            "nothing written"
        )
        assert os.listdir(disk) == ["sft.jsonl"]  # no temporary file, no report
        assert (disk / "sft.jsonl").read_bytes() == b"previous rows\n"
        remount(disk, "size=4m")
        proc = run_filter(ROLLOUTS, disk / "sft.jsonl", disk / "report.json")
        assert proc.returncode == 0, proc.stderr
        assert (disk / "sft.jsonl").read_bytes() == expected["rows"]
        assert (disk / "report.json").read_bytes() == expected["report"]
    assert ROLLOUTS.read_bytes() == before


def test_a_read_only_disk_is_one_line_before_reading(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        (disk / "sft.jsonl").write_bytes(b"previous rows\n")
        remount(disk, "ro")
        line = one_error_line(run_filter(ROLLOUTS, disk / "sft.jsonl"))
        assert line == (
            f"error: {disk}: --output: the file system is read-only: choose another output; nothing written"
        )
        assert (disk / "sft.jsonl").read_bytes() == b"previous rows\n"


@pytest.mark.parametrize("previous", [None, b"previous rows\n"], ids=["no-output-yet", "previous-output"])
def test_sigterm_mid_write_leaves_no_temporary_file(tmp_path: Path, previous: bytes | None) -> None:
    """Before: an 11 MB hidden `.sft.jsonl.*.tmp` stayed. The input repeats data/rollouts.jsonl so
    the write lasts long enough to be interrupted once its temporary file exists."""
    big = tmp_path / "rollouts.jsonl"
    with big.open("wb") as fh:
        for _ in range(60):
            fh.write(ROLLOUTS.read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    if previous is not None:
        (out / "sft.jsonl").write_bytes(previous)
    proc = subprocess.Popen(
        filter_cmd(big, out / "sft.jsonl", out / "report.json"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(name.endswith(".tmp") for name in os.listdir(out)):
            assert proc.poll() is None, "the filter finished before it could be interrupted"
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM
    expected_files = [] if previous is None else ["sft.jsonl"]
    assert sorted(os.listdir(out)) == expected_files
    if previous is not None:
        assert (out / "sft.jsonl").read_bytes() == previous
    # and the output is whole after a run that is not interrupted
    done = run_filter(big, out / "sft.jsonl", out / "report.json")
    assert done.returncode == 0, stderr_tail(done.stderr)
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["totals"]["episodes"] == 60 * 36
    assert (out / "sft.jsonl").read_text(encoding="utf-8").count("\n") == report["totals"]["rows"]
