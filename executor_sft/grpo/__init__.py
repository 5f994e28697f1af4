"""Optional GRPO stage: CLP reward, search environment for TRL's GRPOTrainer, data from rollouts."""

from executor_sft.grpo.data import (
    GRPODataReport,
    build_prompt,
    grpo_examples_from_episodes,
    grpo_examples_from_rollouts,
    load_jsonl,
    to_dataset,
    write_jsonl,
)
from executor_sft.grpo.environment import SearchEnvironment, SearchEnvironmentFactory
from executor_sft.grpo.rewards import (
    DEFAULT_EPS,
    CLPReward,
    JudgeCLPReward,
    JudgeFn,
    clp_reward,
    count_tool_calls,
    final_report,
    make_reward,
)
from executor_sft.grpo.train import GRPOScriptArguments, build_grpo_trainer, load_grpo_dataset, run_grpo

__all__ = [
    "DEFAULT_EPS",
    "CLPReward",
    "GRPODataReport",
    "GRPOScriptArguments",
    "JudgeCLPReward",
    "JudgeFn",
    "SearchEnvironment",
    "SearchEnvironmentFactory",
    "build_grpo_trainer",
    "build_prompt",
    "clp_reward",
    "count_tool_calls",
    "final_report",
    "grpo_examples_from_episodes",
    "grpo_examples_from_rollouts",
    "load_grpo_dataset",
    "load_jsonl",
    "make_reward",
    "run_grpo",
    "to_dataset",
    "write_jsonl",
]
