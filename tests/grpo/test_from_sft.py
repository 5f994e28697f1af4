"""GRPO starts from what the project's SFT writes: its checkpoints, and the `offline:` aliases.

TRL's GRPOTrainer parses every sampled turn with the tokenizer's `response_template` and knows
one only for the chat templates TRL ships; the executor templates SFT saves carry their own.
"""

from __future__ import annotations

import json

import pytest
from post_training import ROOT, run_recipe

from executor_sft.errors import ConfigError
from executor_sft.grpo.policy import load_policy, load_tokenizer
from executor_sft.llm.offline import qwen3_executor_template
from executor_sft.llm.response_template import EXECUTOR_RESPONSE_TEMPLATE
from tests.support import tiny_qwen3

CPU_CONFIG = ROOT / "recipes" / "configs" / "grpo_cpu.yaml"


def _trainer(model, tokenizer, tmp_path, minibench_bm25):
    from trl import GRPOConfig, GRPOTrainer

    from executor_sft.grpo import SearchEnvironmentFactory, to_dataset
    from executor_sft.grpo.data import build_prompt
    from executor_sft.grpo.rewards import clp_em

    rows = [{"prompt": build_prompt("Who?", "Search."), "reference": ["x"]}] * 2
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        use_cpu=True,
        report_to="none",
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[clp_em()],
        args=args,
        train_dataset=to_dataset(rows),
        processing_class=tokenizer,
        environment_factory=SearchEnvironmentFactory(minibench_bm25),
    )


def test_an_executor_checkpoint_without_a_response_template_gets_one(tmp_path, minibench_bm25):
    """A checkpoint saved with the executor template but no `response_template` (as SFT wrote them
    before) loads with one; TRL alone refuses it."""
    model, tok = tiny_qwen3(seed=3)
    tok.chat_template = qwen3_executor_template()
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    assert "response_template" not in json.loads((tmp_path / "ckpt" / "tokenizer_config.json").read_text())

    from transformers import AutoTokenizer

    with pytest.raises(ValueError, match="Unrecognized chat template"):
        _trainer(model, AutoTokenizer.from_pretrained(tmp_path / "ckpt"), tmp_path / "a", minibench_bm25)
    loaded = load_tokenizer(str(tmp_path / "ckpt"))
    assert loaded.response_template == EXECUTOR_RESPONSE_TEMPLATE
    trainer = _trainer(model, loaded, tmp_path / "b", minibench_bm25)
    parsed = trainer.processing_class.parse_response(
        '<tool_call>\n{"name": "search", "arguments": {"query": "Lyon river"}}\n</tool_call><|im_end|>',
        prefix="<|im_start|>assistant\n<think>\n\n</think>\n\n",
    )
    assert parsed["tool_calls"][0]["function"] == {"name": "search", "arguments": {"query": "Lyon river"}}


def test_offline_aliases_resolve_and_unknown_ones_are_config_errors():
    from trl import ModelConfig

    model, tok = load_policy(ModelConfig(model_name_or_path="offline:tiny-qwen3"))
    assert type(model).__name__ == "Qwen3ForCausalLM" and tok.eos_token == "<|im_end|>"
    with pytest.raises(ConfigError, match="not an offline model; known: offline:smollm2, offline:tiny-qwen3"):
        load_policy(ModelConfig(model_name_or_path="offline:qwen3"))  # a tokenizer only


@pytest.mark.slow
def test_grpo_recipe_runs_two_steps_on_the_sft_recipes_output(sft_output, world_index, tmp_path):
    config = json.loads((sft_output / "tokenizer_config.json").read_text())
    assert config["response_template"] == EXECUTOR_RESPONSE_TEMPLATE  # saved with the executor
    out = tmp_path / "grpo"
    proc = run_recipe(
        "grpo_executor",
        "--config", str(CPU_CONFIG),
        "--model_name_or_path", str(sft_output),
        "--retriever", json.dumps({"index": str(world_index)}),
        "--max_completion_length", "32",
        "--output_dir", str(out),
    )  # fmt: skip
    assert "GRPO done: 2 steps" in proc.stdout
    assert (out / "model.safetensors").exists()
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "tags: [executor_sft, grpo, trl, search-agent]" in card and "- last logged step: reward=" in card
    assert "GRPOTrainer" in card.split("## Training procedure")[1] and '"reward_funcs": [' in card
    assert (
        json.loads((out / "tokenizer_config.json").read_text())["response_template"]
        == EXECUTOR_RESPONSE_TEMPLATE
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("offline:nope", "error: model_name_or_path 'offline:nope': not an offline model"),
        ("/nonexistent", "error: model_name_or_path /nonexistent: no such directory"),
        (
            "someone/not-cached-here",
            "error: model_name_or_path someone/not-cached-here: not a local directory and not in the hub cache",
        ),
    ],
)
def test_a_policy_that_cannot_load_is_one_line_and_exit_2(world_index, name, needle):
    proc = run_recipe(
        "grpo_executor",
        "--config", str(CPU_CONFIG),
        "--model_name_or_path", name,
        "--retriever", json.dumps({"index": str(world_index)}),
        expect=2,
    )  # fmt: skip
    assert proc.stderr.strip().splitlines()[-1].startswith(needle), proc.stderr
    assert "Traceback" not in proc.stderr
