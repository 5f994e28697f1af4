"""The shipped multi-agent configs parse through their recipes and carry the seed's values."""

from __future__ import annotations

import pytest
from post_training import ROOT, load_recipe

pytestmark = pytest.mark.slow  # imports TRL

CONFIGS = ROOT / "recipes" / "configs"
ON_CPU = ["--bf16", "false", "--use_cpu", "true"]  # GRPOConfig refuses bf16 without a GPU


def test_wideseek_config_has_app_d_values():
    script, training, model = load_recipe("grpo_marl").parse_args(
        ["--config", str(CONFIGS / "grpo_wideseek_qwen3_4b.yaml"), *ON_CPU]
    )
    assert model.model_name_or_path == "Qwen/Qwen3-4B"
    assert training.chat_template_kwargs == {"enable_thinking": True}
    assert (training.max_steps, training.learning_rate) == (150, 1e-6)
    assert training.per_device_train_batch_size * 32 // training.num_generations == 128  # 32 GPUs, App. D
    assert (script.max_parallel, script.max_rounds, script.max_turns, script.parallel_tool_calls) == (
        10,
        10,
        20,
        5,
    )
    assert script.max_context_tokens == 32768 and script.deep_share == 0.5
    assert script.credit == "shared" and script.token_level and script.agent_level and script.train_lead
    assert script.settings(training).pipeline.max_parallel == 10


def test_singleseek_config_has_app_e1_values():
    script, training, _ = load_recipe("grpo_executor").parse_args(
        ["--config", str(CONFIGS / "grpo_singleseek_qwen3_4b.yaml"), *ON_CPU]
    )
    assert training.max_tool_calling_iterations == 49 and script.max_searches == 49  # 50 turns
    assert list(script.tools) == ["search", "open_document"]
    assert training.per_device_train_batch_size * 16 // training.num_generations == 128  # 16 GPUs, App. D


def test_cpu_config_parses():
    script, training, _ = load_recipe("grpo_marl").parse_args(
        ["--config", str(CONFIGS / "grpo_marl_cpu.yaml")]
    )
    assert (
        training.use_cpu and script.credit == "shared" and not script.train_lead and script.deep_share == 0.5
    )
