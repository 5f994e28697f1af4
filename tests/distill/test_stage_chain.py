"""SFT -> distillation -> GRPO on CPU, each stage a command reading the previous stage's saved output.

The SFT output is made by `recipes/sft_executor.py` (README command 1's recipe, on a tiny Qwen3 to keep
the time down); distillation and GRPO run from their CPU configs with only paths overridden.
"""

from __future__ import annotations

import json

import pytest
from post_training import ROOT, run_recipe

from executor_sft.llm.response_template import EXECUTOR_RESPONSE_TEMPLATE

pytestmark = pytest.mark.slow

CONFIGS = ROOT / "recipes" / "configs"


def test_sft_then_distillation_then_grpo(sft_output, distilled_output, world_index, tmp_path):
    distilled, stdout = distilled_output  # recipes/distill_executor.py run on the SFT recipe's output
    assert "distillation done: 2 steps" in stdout
    saved = json.loads((distilled / "tokenizer_config.json").read_text())
    assert saved["response_template"] == EXECUTOR_RESPONSE_TEMPLATE  # the executor template travels on
    assert (distilled / "chat_template.jinja").read_text() == (sft_output / "chat_template.jinja").read_text()

    tuned = tmp_path / "grpo"
    proc = run_recipe(
        "grpo_executor",
        "--config", str(CONFIGS / "grpo_cpu.yaml"),
        "--model_name_or_path", str(distilled),
        "--retriever", json.dumps({"index": str(world_index)}),
        "--max_completion_length", "32",
        "--output_dir", str(tuned),
    )  # fmt: skip
    assert "GRPO done: 2 steps" in proc.stdout and "rewards/outcome/mean=" in proc.stdout
    assert (tuned / "model.safetensors").exists()
