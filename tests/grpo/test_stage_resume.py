"""GRPO and distillation resume and finish as SFT does: the last complete checkpoint resumes, a
finished run is reported and not retrained, `--fresh true` starts over. Through the recipes, as
commands, on tiny Qwen3 checkpoints."""

from __future__ import annotations

import json

import pytest
from post_training import ROOT, run_recipe

pytestmark = pytest.mark.slow

STAGES = {
    "grpo_executor": ["--config", str(ROOT / "recipes" / "configs" / "grpo_cpu.yaml")],
    "distill_executor": ["--config", str(ROOT / "recipes" / "configs" / "distill_tiny.yaml")],
}


def _state(out):
    return json.loads((out / "trainer_state.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("recipe", list(STAGES))
def test_a_stopped_run_resumes_and_a_finished_one_is_not_retrained(
    recipe, tiny_checkpoint, tiny_teacher, world_index, tmp_path
):
    out = tmp_path / "out"
    args = [
        *STAGES[recipe],
        "--model_name_or_path", str(tiny_checkpoint),
        "--retriever", json.dumps({"index": str(world_index)}),
        "--max_completion_length", "16",
        "--save_strategy", "steps",
        "--save_steps", "1",
        "--output_dir", str(out),
    ]  # fmt: skip
    if recipe == "distill_executor":
        args += ["--teacher_model_name_or_path", str(tiny_teacher)]
    run_recipe(recipe, *args, "--max_steps", "1")
    assert (out / "checkpoint-1").is_dir() and _state(out)["global_step"] == 1

    resumed = run_recipe(recipe, *args, "--max_steps", "2")
    assert f"resuming from {out / 'checkpoint-1'}" in resumed.stderr
    assert _state(out)["global_step"] == 2
    weights = (out / "model.safetensors").stat().st_mtime_ns

    again = run_recipe(recipe, *args, "--max_steps", "2")
    assert f"{out} already holds a finished run (step 2" in again.stdout
    assert "Loading weights" not in again.stderr
    assert (out / "model.safetensors").stat().st_mtime_ns == weights

    fresh = run_recipe(recipe, *args, "--max_steps", "1", "--fresh", "true")
    assert "resuming from" not in fresh.stderr and _state(out)["global_step"] == 1
