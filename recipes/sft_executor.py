r"""Passage-masked SFT of a search executor (TRL SFTTrainer underneath).

    # embedded default: SmolLM2-135M on the project's sample data/sft.jsonl, CPU, a few minutes
    python recipes/sft_executor.py                     # one process (README command 1)
    # our settings (the paper gives no SFT hyperparameters): Qwen3-1.7B, full fine-tune, 3 epochs, batch 16
    accelerate launch --config_file accelerate_configs/deepspeed_zero2.yaml \
        recipes/sft_executor.py --config recipes/configs/sft_qwen3_1.7b.yaml \
        --dataset_name runs/filter/sft.jsonl
    # LoRA instead of a full fine-tune
    python recipes/sft_executor.py --config recipes/configs/sft_qwen3_1.7b.yaml --use_peft --lora_r 32

Without `--config`, `recipes/configs/sft_default.yaml` is the base and the command line
overrides it. Arguments: `SFTScriptArguments` (data, thinking, overflow policy, resume and
`--resume_with_changes`, dataset push), TRL's `SFTConfig` (training) and `ModelConfig` (model, dtype, LoRA).
"""

from __future__ import annotations

from pathlib import Path

from executor_sft.recipe_main import run_recipe

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "sft_default.yaml"


def parse_args(argv: list[str] | None = None):
    from executor_sft.training.launch import refuse_impossible_launch

    refuse_impossible_launch(argv)  # first: the arguments' own checks would fail once per process
    from executor_sft.sft.train import SFTScriptArguments, name_the_cpu_accelerator

    name_the_cpu_accelerator()
    from trl import ModelConfig, SFTConfig

    from executor_sft.configfile import parse_trl_args

    return parse_trl_args((SFTScriptArguments, SFTConfig, ModelConfig), argv, DEFAULT_CONFIG, __doc__)


def main(argv: list[str] | None = None):
    """Train; bad data, a resume of a checkpoint trained with other data or settings, or an
    output_dir that is not ours ends with one line and exit 2 before any model loads
    (`train_executor` checks them first); so does a full or read-only disk met while saving.
    Ctrl-C or SIGTERM while training saves a checkpoint at the current step and says so (exit
    130 or 143); the same command resumes from it."""
    from executor_sft.files import output_errors
    from executor_sft.sft.train import train_executor

    script_args, training_args, model_args = parse_args(argv)
    with output_errors(training_args.output_dir):
        return train_executor(script_args, training_args, model_args)


if __name__ == "__main__":
    run_recipe(main)
