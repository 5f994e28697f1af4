"""jsonl's writers: which errors are the output's, and SIGTERM during a write (in-process).

The recipes' outputs on real devices, FIFOs, symlinks and tmpfs disks are tested in
tests/filters/test_faults_filter_outputs.py; these are the rules behind them.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from executor_sft.errors import OutputError
from executor_sft.files import as_output_error, atomic_open, write_jsonl


def test_an_input_error_inside_the_block_is_not_called_an_output_error(tmp_path: Path) -> None:
    """A failing read of an input while the rows are written keeps its own type; no temp file stays."""
    with pytest.raises(PermissionError) as exc, atomic_open(tmp_path / "out.jsonl"):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "input.jsonl"))
    assert not isinstance(exc.value, OutputError)
    assert os.listdir(tmp_path) == []


def test_a_write_error_inside_the_block_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_bytes(b"before\n")
    with pytest.raises(OutputError) as exc, atomic_open(tmp_path / "out.jsonl"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert (
        str(exc.value)
        == f"{tmp_path / 'out.jsonl'}: the disk is full: free some space or choose another output"
    )
    assert exc.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == ["out.jsonl"] and (tmp_path / "out.jsonl").read_bytes() == b"before\n"


class Stopped(Exception):
    pass


def test_sigterm_mid_write_removes_the_temporary_file_then_runs_the_handler_before(tmp_path: Path) -> None:
    seen: list[int] = []

    def before(signum, frame):
        seen.append(signum)
        raise Stopped

    old = signal.signal(signal.SIGTERM, before)
    try:
        (tmp_path / "out.jsonl").write_bytes(b"before\n")
        with pytest.raises(Stopped), atomic_open(tmp_path / "out.jsonl") as fh:
            fh.write("half a row")
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes
                fh.write("x")
        assert seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is before
        assert os.listdir(tmp_path) == ["out.jsonl"] and (tmp_path / "out.jsonl").read_bytes() == b"before\n"
        write_jsonl(tmp_path / "out.jsonl", [{"a": 1}])
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, old)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
        OSError(errno.EROFS, os.strerror(errno.EROFS)),
    ],
    ids=["a-library-message", "an-errno"],
)
def test_a_wrapped_disk_error_is_found_behind_the_library_error(tmp_path: Path, exc: Exception) -> None:
    try:
        try:
            raise exc
        except Exception as inner:
            raise ValueError("the library's own wrapper") from inner
    except ValueError as outer:
        error = as_output_error(tmp_path, outer)
    assert isinstance(error, OutputError) and str(error).startswith(f"{tmp_path}: the ")


def test_other_errors_are_not_disk_errors(tmp_path: Path) -> None:
    assert as_output_error(tmp_path, ValueError("a bug")) is None
    assert as_output_error(tmp_path, OSError(errno.ECONNREFUSED, "Connection refused")) is None


@pytest.mark.faults
def test_torch_save_meeting_a_full_disk_is_the_disk_full_line(tmp_path):
    """Issue 41, point 6: SFT's checkpoint save (torch.save of the optimizer) on a full disk
    raises torch's `RuntimeError: [enforce fail at inline_container.cc:...]`, naming no errno;
    the recipe's handler (`as_output_error`) must still say the disk is full."""
    import torch

    from tests.support.disks import small_tmpfs

    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        out = disk / "checkpoint-2"
        out.mkdir()
        with pytest.raises(RuntimeError) as info:
            torch.save({"exp_avg": torch.zeros(200_000)}, out / "optimizer.pt")
        error = as_output_error(out, info.value)
        assert isinstance(error, OutputError)
        assert str(error) == f"{out}: the disk is full: free some space or choose another output"
    assert as_output_error(tmp_path, RuntimeError("[enforce fail at inline_container.cc:672] x")) is None
