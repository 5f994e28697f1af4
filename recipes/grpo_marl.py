r"""Multi-agent GRPO: whole episodes (lead, parallel sub-agents, final answer) as GRPO samples (TRL).

    # CPU, offline: the synthetic world with wide tasks, README command 1's SFT output as the policy
    python -m executor_sft.synthetic --out runs/wide/world --entities 300 --questions 160 --wide_share 0.3
    python recipes/build_index.py --corpus runs/wide/world/corpus.jsonl --output runs/wide/index --bm25
    python recipes/grpo_marl.py --config recipes/configs/grpo_marl_cpu.yaml
    # WideSeek-R1's settings (App. D) on GPUs, with its shared credit; ours instead:
    ... --config recipes/configs/grpo_wideseek_qwen3_4b.yaml --credit substitution

Arguments: `MARLScriptArguments` (questions, retriever, the fixed roles, budgets, `credit`,
`token_level`, `agent_level`, `train_lead`, failure rules, `deep_share`), TRL's `GRPOConfig` and
`ModelConfig`. See docs/post_training.md, "Multi-agent GRPO".
"""

from __future__ import annotations

import os

from executor_sft.recipe_main import run_recipe


def parse_args(argv: list[str] | None = None):
    from executor_sft.training.launch import refuse_impossible_launch

    refuse_impossible_launch(argv)  # first: the arguments' own checks would fail once per process
    from executor_sft.sft.train import name_the_cpu_accelerator

    name_the_cpu_accelerator()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, ModelConfig

    from executor_sft.configfile import parse_trl_args
    from executor_sft.grpo.marl_train import MARLScriptArguments

    return parse_trl_args((MARLScriptArguments, GRPOConfig, ModelConfig), argv, description=__doc__)


def main(argv: list[str] | None = None):
    from executor_sft.grpo.marl_train import run_marl

    script_args, training_args, model_args = parse_args(argv)
    return run_marl(script_args, training_args, model_args)


if __name__ == "__main__":
    run_recipe(main)
