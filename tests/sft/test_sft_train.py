"""Training end to end on CPU with tiny models: loss falls, checkpoints reload, resume, LoRA,
the recipe's command line and DeepSpeed ZeRO-2 (one process, CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rowgen import make_rows, write_jsonl
from script_modules import load_script
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, SFTConfig

from executor_sft.llm.offline import qwen3_executor_template
from executor_sft.sft import DEFAULT_SFT_DATA
from executor_sft.sft.templates import qwen3_training_template
from executor_sft.sft.train import SFTScriptArguments, train_executor
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]


def _recipe():
    return load_script("recipes/sft_executor.py")


def _args(tmp_path, out="out", **overrides):
    values = dict(
        output_dir=str(tmp_path / out),
        max_steps=20,
        per_device_train_batch_size=2,
        learning_rate=3e-3,
        lr_scheduler_type="constant",
        max_length=1024,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
    )
    return SFTConfig(**{**values, **overrides})


@pytest.fixture()
def data_file(tmp_path):
    path = write_jsonl(tmp_path / "sft.jsonl", make_rows(8, seed=3, passage_words=5))
    (tmp_path / "report.json").write_text(json.dumps({"strata": {"single_search": {"records": 4}}}))
    return path


@pytest.mark.slow
def test_training_lowers_loss_and_checkpoint_generates_with_inference_template(tmp_path, data_file):
    result = train_executor(
        SFTScriptArguments(dataset_name=str(data_file)), _args(tmp_path), ModelConfig("offline:tiny-qwen3")
    )
    losses = [
        h["loss"]
        for h in json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
        if "loss" in h
    ]
    assert len(losses) == 20
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses
    assert result.length_report.rows == 8

    out = tmp_path / "out"
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == qwen3_executor_template()  # the executor's inference template
    assert tok.chat_template != qwen3_training_template()
    model = AutoModelForCausalLM.from_pretrained(out)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Who wrote Nine Winters?"}],
        add_generation_prompt=True,
        enable_thinking=False,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        gen = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > prompt["input_ids"].shape[1]
    card = (out / "README.md").read_text()
    assert (
        "executor_sft training record" in card
        and '"single_search"' in card
        and "| single_search | 4 |" in card
    )


@pytest.mark.slow
def test_auto_resume_and_lora(tmp_path, data_file):
    script = SFTScriptArguments(dataset_name=str(data_file))
    model = ModelConfig(
        "offline:tiny-qwen3", use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"]
    )
    first = train_executor(script, _args(tmp_path, max_steps=2, save_strategy="steps", save_steps=2), model)
    assert first.resumed_from is None
    assert (tmp_path / "out" / "adapter_config.json").exists()
    second = train_executor(script, _args(tmp_path, max_steps=3, save_strategy="steps", save_steps=2), model)
    assert second.resumed_from and second.resumed_from.endswith("checkpoint-2")
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


def test_default_recipe_arguments():
    script_args, training_args, model_args = _recipe().parse_args([])
    assert model_args.model_name_or_path == "offline:smollm2"
    assert Path(script_args.dataset_name) == DEFAULT_SFT_DATA and DEFAULT_SFT_DATA.exists()
    assert training_args.max_steps > 0 and training_args.output_dir.endswith("sft-default")
    _, paper_args, paper_model = _recipe().parse_args(
        ["--config", str(REPO / "recipes/configs/sft_qwen3_1.7b.yaml"), "--bf16", "false"]
    )
    assert paper_model.model_name_or_path == "Qwen/Qwen3-1.7B"
    assert (paper_args.learning_rate, paper_args.num_train_epochs, paper_args.max_length) == (1e-5, 3, 4096)
    assert paper_args.per_device_train_batch_size * paper_args.gradient_accumulation_steps * 8 == 16


@pytest.mark.slow
def test_recipe_under_accelerate_deepspeed_zero2_on_cpu(tmp_path, data_file):
    """`accelerate launch` + DeepSpeed ZeRO-2, one CPU process (DeepSpeed's CPU accelerator)."""
    pytest.importorskip("deepspeed")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO / "accelerate_configs/deepspeed_zero2.yaml"),
        "--num_processes", "1", "--mixed_precision", "no",
        str(REPO / "recipes/sft_executor.py"),
        "--model_name_or_path", "offline:tiny-qwen3", "--dataset_name", str(data_file),
        "--output_dir", str(tmp_path / "ds"), "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2",
        "--max_length", "1024", "--use_cpu", "true", "--disable_tqdm", "true",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    assert (tmp_path / "ds" / "checkpoint-2" / "global_step2").is_dir()  # a DeepSpeed (ZeRO) checkpoint
    assert (tmp_path / "ds" / "model.safetensors").exists()
    assert "[executor_sft] trained offline:tiny-qwen3 on 8 rows" in proc.stdout


@pytest.mark.slow
def test_relaunching_a_finished_run_does_not_train_again(tmp_path, data_file, capsys):
    script = SFTScriptArguments(dataset_name=str(data_file))
    args = _args(tmp_path, max_steps=2, save_strategy="steps", save_steps=1)
    first = train_executor(script, args, ModelConfig("offline:tiny-qwen3"))
    state = tmp_path / "out" / "trainer_state.json"
    before = state.read_bytes()
    again = train_executor(script, _args(tmp_path, max_steps=2), ModelConfig("offline:tiny-qwen3"))
    assert "already holds a finished run (step 2" in capsys.readouterr().out
    assert state.read_bytes() == before
    assert again.metrics["train_loss"] == pytest.approx(first.metrics["train_loss"])
    fresh = train_executor(
        SFTScriptArguments(dataset_name=str(data_file), fresh=True),
        _args(tmp_path, max_steps=2),
        ModelConfig("offline:tiny-qwen3"),
    )
    assert fresh.resumed_from is None and "trained offline:tiny-qwen3" in capsys.readouterr().out


@pytest.mark.slow
def test_resume_restores_tied_weights_without_a_warning(tmp_path, data_file, caplog):
    import logging

    import transformers

    transformers.logging.enable_propagation()
    script = SFTScriptArguments(dataset_name=str(data_file))
    train_executor(
        script,
        _args(tmp_path, max_steps=2, save_strategy="steps", save_steps=2),
        ModelConfig("offline:tiny-qwen3"),
    )
    with caplog.at_level(logging.WARNING):
        second = train_executor(
            script,
            _args(tmp_path, max_steps=3, save_strategy="steps", save_steps=2),
            ModelConfig("offline:tiny-qwen3"),
        )
    assert second.resumed_from and second.resumed_from.endswith("checkpoint-2")
    assert "missing keys" not in caplog.text
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.slow
def test_model_card_names_the_base_model_and_shows_plain_settings(tmp_path, data_file):
    train_executor(
        SFTScriptArguments(dataset_name=str(data_file)),
        _args(tmp_path, max_steps=1, lr_scheduler_type="cosine", warmup_steps=0.1),
        ModelConfig("offline:tiny-qwen3"),
    )
    card = (tmp_path / "out" / "README.md").read_text()
    assert "`offline:tiny-qwen3`: a random 2-layer Qwen3" in card and "huggingface.co/None" not in card
    assert "time machine" not in card and "SchedulerType" not in card
    assert '"lr_scheduler_type": "cosine"' in card and '"warmup": "10% of the steps"' in card
    assert '"max_steps": 1' in card and "num_train_epochs" not in card
    first = json.loads(data_file.read_text().splitlines()[0])
    assert "tools = " + json.dumps(first["tools"]) in card  # the executor's own tool
    assert first["messages"][0]["content"][:40] in card.replace("\\n", "\n")  # and its system prompt
