r"""Optional GRPO stage for the executor: multi-turn search rollouts, weighted rewards (TRL GRPOTrainer).

    # 1) prompts + references from verified teacher reports
    python recipes/build_grpo_data.py --rollouts runs/rollouts.jsonl --output runs/grpo.jsonl
    # 2) GRPO from the SFT checkpoint (vLLM colocate on one GPU)
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/grpo_executor.py \
        --config recipes/configs/grpo_qwen3_1.7b.yaml \
        --model_name_or_path outputs/qwen3-1.7b-executor-sft \
        --dataset_name runs/grpo.jsonl --retriever '{index: indexes/wiki}'
    # LoRA instead of a full fine-tune
    ... --use_peft --lora_r 32 --lora_target_modules all-linear
    # a reward of your own next to the CLP reward (a factory in my_rewards.py on PYTHONPATH)
    ... --reward_funcs clp_em my_rewards:QuotesPassage --reward_weights 1.0 0.5

Arguments: `GRPOScriptArguments` (a `trl.ScriptArguments`: data, retriever, search budget, rewards), TRL's `GRPOConfig`
(training, generation, vLLM, `reward_weights`) and `ModelConfig` (model, dtype, LoRA). See docs/grpo.md.
A config or reward the run cannot use is one `error:` line and exit status 2, before any model loads.
"""

from __future__ import annotations

import os

from executor_sft.recipe_main import run_recipe


def parse_args(argv: list[str] | None = None):
    from executor_sft.training.launch import refuse_impossible_launch

    refuse_impossible_launch(argv)  # first: the arguments' own checks would fail once per process
    from executor_sft.sft.train import name_the_cpu_accelerator

    name_the_cpu_accelerator()  # before TRL's config: DeepSpeed would print its device probe
    # environment_factory is experimental in TRL; trl is pinned and its use tested here (docs/grpo.md),
    # so its notice on every run tells a user nothing to do. TRL_EXPERIMENTAL_SILENCE=0 brings it back.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, ModelConfig

    from executor_sft.configfile import parse_trl_args
    from executor_sft.grpo.train import GRPOScriptArguments

    return parse_trl_args((GRPOScriptArguments, GRPOConfig, ModelConfig), argv, description=__doc__)


def main(argv: list[str] | None = None):
    from executor_sft.grpo.train import run_grpo

    script_args, training_args, model_args = parse_args(argv)
    return run_grpo(script_args, training_args, model_args)


if __name__ == "__main__":
    run_recipe(main)
