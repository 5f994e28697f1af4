"""Two processes (`accelerate launch --multi_gpu --num_processes 2` with ACCELERATE_USE_CPU: torchrun,
DDP over gloo; `--cpu` alone starts one process) train what one process
trains at the same global batch: 2 processes x 1 row vs 1 process x 2 rows, same rows each step.
Equal per-step losses show that the rows are sharded without overlap or loss, and that the masks
and the token-weighted loss survive the split (TRL divides by the tokens of every rank). Each
checkpoint's run record and the train_loss carry the loss gathered over both processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rowgen import make_rows, write_jsonl

from executor_sft.training.run_record import RUN_RECORD
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
LOSS_ATOL = 1e-4  # fp32; the only difference is the order of float additions (gloo all-reduce)


GLOO_ABORT = "terminate called without an active exception"


def _launch(tmp_path: Path, data: Path, name: str, processes: int, batch: int) -> tuple[list[float], float]:
    """Per-step logged losses and train_loss of a 2-step run of the recipe (checked to have run in
    `processes`), whose checkpoints' run records carry the loss sum gathered over processes."""
    out = tmp_path / name
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "true",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    spawn = ["--multi_gpu"] if processes > 1 else []
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", *spawn,
        "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(29600 + processes),
        str(REPO / "recipes/sft_executor.py"),
        "--model_name_or_path", "offline:tiny-qwen3", "--dtype", "float32", "--dataset_name", str(data),
        "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", str(batch),
        "--learning_rate", "1e-3", "--lr_scheduler_type", "constant", "--warmup_steps", "0",
        "--max_length", "1024", "--logging_steps", "1", "--use_cpu", "true", "--disable_tqdm", "true",
        "--save_strategy", "steps", "--save_steps", "1", "--seed", "0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    if proc.returncode != 0 and GLOO_ABORT in proc.stderr:
        # A known abort inside torch's CPU (gloo) two-process run, not in our code: seen in about
        # 1 of 5 CI runs, during or after the first step. One fresh retry; a second abort fails.
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    card = (out / "README.md").read_text()
    assert f'"processes": {processes}' in card, "the run did not use the requested processes"
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    losses = [h["loss"] for h in history if "loss" in h]
    train_loss = json.loads((out / "train_results.json").read_text())["train_loss"]
    for step in (1, 2):
        record = json.loads((out / f"checkpoint-{step}" / RUN_RECORD).read_text())
        assert record["loss_sum"] == pytest.approx(sum(losses[:step]), abs=1e-6), (step, record, losses)
    assert train_loss == pytest.approx(sum(losses) / 2, abs=1e-6)
    return losses, train_loss


@pytest.mark.slow
def test_two_processes_match_one_process_at_the_same_global_batch(tmp_path):
    data = write_jsonl(tmp_path / "sft.jsonl", make_rows(8, seed=5, passage_words=6))
    two, two_train_loss = _launch(tmp_path, data, "two", processes=2, batch=1)
    one, one_train_loss = _launch(tmp_path, data, "one", processes=1, batch=2)
    assert len(one) == len(two) == 2
    assert one[0] != one[1], "the second step must see other rows and updated weights"
    print(f"per-step loss, 1 process: {one}; 2 processes: {two}")
    assert max(abs(a - b) for a, b in zip(one, two, strict=True)) < LOSS_ATOL, (one, two)
    assert abs(one_train_loss - two_train_loss) < LOSS_ATOL
