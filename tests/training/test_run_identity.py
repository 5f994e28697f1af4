"""Every training stage knows what it was trained with, through the recipes as a user runs them.

SFT, distillation and GRPO alike: a relaunch or resume with other settings is refused in one
line, a checkpoint whose run record is torn is not resumed unchecked, a finished run whose model
is cut is not reported finished, a second launch into a folder being written is refused, and a
`--hub_token` reaches no file. One sequence of launches per stage, on tiny Qwen3 checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from one_line import one_error_line
from post_training import ROOT, run_recipe

from executor_sft.training.run_record import RUN_RECORD
from tests.support.recipes import stderr_tail

pytestmark = pytest.mark.slow

SECRET = "hf_doNotWriteMe0123456789"
SFT_ROWS = (ROOT / "data" / "sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:2]


def _stage_args(recipe: str, out: Path, tmp: Path, checkpoint: Path, teacher: Path, index: Path) -> list[str]:
    common = ["--output_dir", str(out), "--save_strategy", "steps", "--save_steps", "1"]
    if recipe == "sft_executor":
        data = tmp / "sft.jsonl"
        data.write_text("".join(SFT_ROWS), encoding="utf-8")
        return [
            *common,
            "--model_name_or_path",
            str(checkpoint),
            "--dataset_name",
            str(data),
            "--max_length",
            "2048",
        ]
    args = [
        "--config", str(ROOT / "recipes" / "configs" / ("grpo_cpu.yaml" if recipe == "grpo_executor" else "distill_tiny.yaml")),
        "--model_name_or_path", str(checkpoint),
        "--retriever", json.dumps({"index": str(index)}),
        "--max_completion_length", "16",
        *common,
    ]  # fmt: skip
    if recipe == "distill_executor":
        args += ["--teacher_model_name_or_path", str(teacher)]
    return args


def _files_holding(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("recipe", ["sft_executor", "distill_executor", "grpo_executor"])
def test_a_stage_refuses_other_settings_damaged_records_and_a_second_writer_and_keeps_tokens_off_disk(
    recipe, tiny_checkpoint, tiny_teacher, world_index, tmp_path
):
    out = tmp_path / "out"
    args = _stage_args(recipe, out, tmp_path, tiny_checkpoint, tiny_teacher, world_index)
    lr = ["--learning_rate", "1e-5"]

    run_recipe(recipe, *args, *lr, "--max_steps", "2", "--hub_token", SECRET)
    assert (out / "checkpoint-2" / RUN_RECORD).is_file() and (out / RUN_RECORD).is_file()
    assert _files_holding(tmp_path, SECRET) == []

    # A finished run relaunched with another learning rate, or another base model, is not "done".
    line = one_error_line(run_recipe(recipe, *args, "--learning_rate", "3e-3", "--max_steps", "2", expect=2))
    assert line.startswith(f"error: {out}: holds a finished run trained with other settings than this run")
    assert "learning_rate (1e-05 -> 0.003)" in line and "--fresh true" in line
    other_base = [*args, *lr, "--max_steps", "2", "--model_name_or_path", str(tiny_teacher)]
    line = one_error_line(run_recipe(recipe, *other_base, expect=2))
    assert "model (" in line and "model_fingerprint (" in line

    # The newest checkpoint's record torn and the final model cut: neither is trusted. The run is
    # not finished, checkpoint-2 is incomplete, so checkpoint-1 is what a resume would continue.
    (out / "checkpoint-2" / RUN_RECORD).write_text('{"identity": {"learn', encoding="utf-8")
    _cut(out / "model.safetensors")
    line = one_error_line(run_recipe(recipe, *args, "--learning_rate", "3e-3", "--max_steps", "3", expect=2))
    assert line.startswith(f"error: {out / 'checkpoint-1'}: was trained with other settings than this run")
    assert "learning_rate (1e-05 -> 0.003)" in line and "--resume_with_changes true" in line

    resumed = run_recipe(recipe, *args, *lr, "--max_steps", "3")
    assert f"resuming from {out / 'checkpoint-1'}" in resumed.stderr
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # the final model opens again

    # One writer per output folder: a second launch while the first holds it is one line.
    first = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "recipes" / f"{recipe}.py"),
            *args,
            *lr,
            "--max_steps",
            "1",
            "--fresh",
            "true",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = out.with_name(out.name + ".lock")
    try:
        deadline = time.monotonic() + 120
        while not lock.is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lock.is_file(), "the first launch never took the output folder's lock"
        first.send_signal(signal.SIGSTOP)
        line = one_error_line(run_recipe(recipe, *args, *lr, "--max_steps", "1", "--fresh", "true", expect=2))
        assert line == (
            f"error: {out}: another process (pid {first.pid}) is writing it; wait for it to finish, "
            "or choose another --output_dir"
        )
    finally:
        first.send_signal(signal.SIGCONT)
        _, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr_tail(stderr)
    assert not lock.exists()
    # --fresh started over: no checkpoint of the earlier 3-step run is left for a resume to pick
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["max_steps"] == 1
