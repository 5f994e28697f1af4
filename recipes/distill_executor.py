"""On-policy distillation of the executor with the search tool (TRL's DistillationTrainer), after SFT.

    # CPU, offline: a tiny student and teacher (tests and smoke runs)
    python recipes/distill_executor.py --config recipes/configs/distill_tiny.yaml
    # Qwen3-1.7B student from its SFT checkpoint, Qwen3-8B teacher (same tokenizer), one GPU
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/distill_executor.py \
        --config recipes/configs/distill_qwen3_1.7b.yaml \
        --model_name_or_path outputs/qwen3-1.7b-executor-sft --rollouts runs/rollouts.jsonl \
        --retriever '{index: indexes/wiki}'

Arguments: `DistillScriptArguments` (prompts from GRPO rows, rollouts or a questions file; retriever; search
budget), TRL's `DistillationConfig` (teacher, `beta` = 1: reverse KL, generation, vLLM) and `ModelConfig`
(student, dtype, LoRA). See docs/post_training.md. A teacher whose tokenizer is not the student's, or any
other config the run cannot use, is one `error:` line and exit status 2, before any model loads.
"""

from __future__ import annotations

from executor_sft.recipe_main import run_recipe


def parse_args(argv: list[str] | None = None):
    from executor_sft.training.launch import refuse_impossible_launch

    refuse_impossible_launch(argv)  # first: the arguments' own checks would fail once per process
    from executor_sft.sft.train import name_the_cpu_accelerator

    name_the_cpu_accelerator()  # before TRL's config: DeepSpeed would print its device probe
    from trl import DistillationConfig, ModelConfig

    from executor_sft.configfile import parse_trl_args
    from executor_sft.distill.train import DistillScriptArguments

    return parse_trl_args(
        (DistillScriptArguments, DistillationConfig, ModelConfig), argv, description=__doc__
    )


def main(argv: list[str] | None = None):
    from executor_sft.distill.train import run_distill

    script_args, training_args, model_args = parse_args(argv)
    return run_distill(script_args, training_args, model_args)


if __name__ == "__main__":
    run_recipe(main)
