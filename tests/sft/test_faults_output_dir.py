"""SFT outputs are the user's: a folder we did not make, a file, a read-only or full disk.

Each case runs recipes/sft_executor.py as a subprocess with the tiny offline model and checks
the exit status, the one `error:` line, and that the user's files are byte-identical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from one_line import one_error_line
from rowgen import make_rows, write_jsonl

from executor_sft.training.output_dir import MARKER
from tests.support.disks import remount, small_tmpfs
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # every test launches the SFT recipe (tests/slow.py)


@pytest.fixture()
def data_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "sft.jsonl", make_rows(8, seed=3, passage_words=5))


def run_sft(data: Path, output_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, str(REPO / "recipes/sft_executor.py"),
        "--model_name_or_path", "offline:tiny-qwen3", "--dataset_name", str(data),
        "--output_dir", str(output_dir), "--max_steps", "1", "--max_length", "1024",
        "--save_strategy", "steps", "--save_steps", "1", "--report_to", "none",
        "--use_cpu", "true", "--disable_tqdm", "true", *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return run_script(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.faults
def test_a_folder_holding_the_users_files_is_refused_and_left_as_it_was(tmp_path: Path, data_file: Path):
    out = tmp_path / "model"
    out.mkdir()
    mine = {"README.md": b"# my notes\n", "config.json": b'{"mine": true}\n'}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    line = one_error_line(run_sft(data_file, out))
    assert line.startswith(f"error: {out}: --output_dir is not empty and no executor_sft run made it")
    assert "README.md, config.json" in line
    assert sorted(os.listdir(out)) == sorted(mine)
    assert all((out / name).read_bytes() == data for name, data in mine.items())


@pytest.mark.faults
def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path, data_file: Path):
    out = tmp_path / "model"
    out.write_bytes(b"a file\n")
    line = one_error_line(run_sft(data_file, out))
    assert line == f"error: {out}: --output_dir is a file: name a directory"
    assert out.read_bytes() == b"a file\n"


@pytest.mark.faults
def test_a_read_only_disk_is_one_line_before_the_model_loads(tmp_path: Path, data_file: Path):
    with small_tmpfs(tmp_path / "ro", "1m") as disk:
        remount(disk, "ro")
        line = one_error_line(run_sft(data_file, disk / "model"))
        assert line == f"error: {disk}: --output_dir: the file system is read-only: choose another output"
        assert os.listdir(disk) == []


@pytest.mark.faults
def test_a_full_disk_while_saving_is_one_line_then_a_clean_rerun_finishes(tmp_path: Path, data_file: Path):
    """256 KB holds the run's mark and model card but not a checkpoint. With room again, the
    folder is still ours: --fresh trains it through, and a plain relaunch finds the finished run."""
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        out = disk / "model"
        line = one_error_line(run_sft(data_file, out))
        assert line == f"error: {out}: the disk is full: free some space or choose another output"
        assert (out / MARKER).is_file()
        remount(disk, "size=64m")
        again = run_sft(data_file, out, "--fresh", "true")
        assert again.returncode == 0, stderr_tail(again.stderr)
        assert "[executor_sft] trained offline:tiny-qwen3 on 8 rows" in again.stdout
        relaunch = run_sft(data_file, out)
        assert relaunch.returncode == 0, stderr_tail(relaunch.stderr)
        assert f"{out} already holds a finished run (step 1" in relaunch.stdout
