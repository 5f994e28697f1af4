"""SFT under real faults: a SIGKILL while a checkpoint is being saved, then a relaunch; a
relaunch with other data and learning rate. The recipe runs as a subprocess (tiny Qwen3, CPU)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forkserver import run_script
from rowgen import make_rows, write_jsonl

from tests.support.recipes import stderr_tail

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
RUN_TIMEOUT_S = 600


def _cmd(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, str(REPO / "recipes/sft_executor.py"),
        "--model_name_or_path", "offline:tiny-qwen3", "--dtype", "float32", "--dataset_name", str(data),
        "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2",
        "--per_device_train_batch_size", "1", "--learning_rate", "3e-3", "--lr_scheduler_type", "constant",
        "--warmup_steps", "0", "--max_length", "1024", "--logging_steps", "1", "--use_cpu", "true",
        "--disable_tqdm", "true", "--report_to", "none", "--seed", "0", *extra,
    ]  # fmt: skip


def _run(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_script(
        _cmd(data, out, *extra),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=out.parent,
    )


def _losses(out: Path) -> list[tuple[int, float]]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [(h["step"], h["loss"]) for h in history if "loss" in h]


def _train_loss(out: Path) -> float:
    return json.loads((out / "train_results.json").read_text())["train_loss"]


def _printed_loss(stdout: str) -> str:
    return re.search(r"\[executor_sft\] trained .*; train_loss=([0-9.]+);", stdout).group(1)


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "sft.jsonl", make_rows(8, seed=3, passage_words=5))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("whole") / "out"
    proc = _run(data, out)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    return out, proc.stdout


KILL_ATTEMPTS = 5


def _caught(checkpoint: Path, probe: str, whole: Path) -> bool:
    """Whether the kill landed where the case needs it: in a folder still empty, or while `probe`
    was being written (shorter than the uninterrupted run's)."""
    if not probe:
        return not any(checkpoint.iterdir())
    done = checkpoint / probe
    return done.is_file() and done.stat().st_size < (whole / checkpoint.name / probe).stat().st_size


def _kill_when(proc: subprocess.Popen, path: Path, timeout_s: float = RUN_TIMEOUT_S) -> None:
    """SIGKILL `proc` as soon as `path` exists (polled every half millisecond)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, f"the run ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout_s} s"
        time.sleep(0.0005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.parametrize(
    ("probe", "left_out"),
    [
        # The folder was just made; the run record is written after the Trainer's own files.
        ("", "trainer_state.json, executor_sft_run.json, model weights, optimizer state, scheduler state"),
        (
            "optimizer.pt",
            r"trainer_state.json, executor_sft_run.json, scheduler state, optimizer.pt \(cut short\)",
        ),
    ],
    ids=["empty-folder", "optimizer-cut-short"],
)
def test_sigkill_mid_save_relaunch_skips_the_checkpoint_and_reports_the_whole_runs_train_loss(
    tmp_path, data, uninterrupted, probe, left_out
):
    whole, whole_stdout = uninterrupted
    data_before = data.read_bytes()
    # The kill is sent the moment `probe` appears; on a loaded machine the poll can wake after the
    # probe's file, or the whole save, has finished (a tiny model's optimizer is written in
    # milliseconds). That attempt misses the case, so it is made again in a new folder, at most
    # KILL_ATTEMPTS times.
    for attempt in range(KILL_ATTEMPTS):
        out = tmp_path / f"out{attempt}"
        proc = subprocess.Popen(
            _cmd(data, out), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path
        )
        try:
            _kill_when(proc, out / "checkpoint-4" / probe)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        if _caught(out / "checkpoint-4", probe, whole):
            break
    else:
        pytest.fail(f"in {KILL_ATTEMPTS} attempts the kill always came too late")
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()

    again = _run(data, out)
    assert again.returncode == 0, stderr_tail(again.stderr)
    assert re.search(
        rf"skipping incomplete checkpoint {re.escape(str(out))}/checkpoint-4 \(missing or damaged: {left_out}\)",
        again.stderr,
    )
    assert f"resuming from {out}/checkpoint-2" in again.stderr
    assert "Traceback" not in again.stderr
    # The same steps, the same losses, and the train_loss of every step, not of the relaunch's two.
    assert [step for step, _ in _losses(out)] == [1, 2, 3, 4]
    assert [loss for _, loss in _losses(out)] == pytest.approx([loss for _, loss in _losses(whole)], abs=1e-6)
    assert _train_loss(out) == pytest.approx(_train_loss(whole), rel=1e-6)
    assert _printed_loss(again.stdout) == _printed_loss(whole_stdout)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()  # saved again, whole
    assert data.read_bytes() == data_before


def test_resume_with_other_data_and_learning_rate_is_refused_unless_accepted(tmp_path, data):
    other = write_jsonl(tmp_path / "other.jsonl", make_rows(8, seed=50, passage_words=5))
    out = tmp_path / "out"
    first = _run(data, out, "--max_steps", "2")
    assert first.returncode == 0, stderr_tail(first.stderr)
    before = _tree(out)

    refused = _run(other, out, "--learning_rate", "1e-3")
    assert refused.returncode == 2, stderr_tail(refused.stderr)
    line = refused.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {out}/checkpoint-2: was trained with other settings")
    assert "data (8 rows sha256:" in line and "learning_rate (0.003 -> 0.001)" in line
    assert "--resume_with_changes true" in line
    assert _tree(out) == before, "a refused resume must leave output_dir as it was"

    accepted = _run(other, out, "--learning_rate", "1e-3", "--resume_with_changes", "true")
    assert accepted.returncode == 0, stderr_tail(accepted.stderr)
    assert f"resuming {out}/checkpoint-2 with changed settings: data (" in accepted.stderr
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    card = (out / "README.md").read_text()
    assert "### Configuration (from step 3)" in card and '"learning_rate": 0.001' in card
    assert "### Configuration until step 2 (resumed with changes: data, learning_rate)" in card
    assert '"learning_rate": 0.003' in card and f"Data: `{data}` (8 rows, sha256 `" in card
    record = json.loads((out / "executor_sft_run.json").read_text())
    assert [e["changed"] for e in record["earlier"]] == [["data", "learning_rate"]]

    # The finished run is the accepted one's: the first settings are no longer its settings.
    finished = _run(data, out)
    assert finished.returncode == 2
    assert finished.stderr.strip().startswith(
        f"error: {out}: holds a finished run trained with other settings"
    )
