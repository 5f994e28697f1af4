"""Optional GRPO stage: named weighted rewards (CLP built in), search environment for TRL's GRPOTrainer, data from rollouts."""

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
from executor_sft.grpo.reward_funcs import build_reward_funcs
from executor_sft.grpo.rewards import (
    DEFAULT_EPS,
    REWARDS,
    CLPReward,
    JudgeCLPReward,
    JudgeFn,
    RewardFactory,
    RewardFunc,
    clp_reward,
    count_tool_calls,
    final_report,
)
from executor_sft.grpo.train import GRPOScriptArguments, build_grpo_trainer, load_grpo_dataset, run_grpo

__all__ = [
    "DEFAULT_EPS",
    "REWARDS",
    "CLPReward",
    "GRPODataReport",
    "GRPOScriptArguments",
    "JudgeCLPReward",
    "JudgeFn",
    "RewardFactory",
    "RewardFunc",
    "SearchEnvironment",
    "SearchEnvironmentFactory",
    "build_grpo_trainer",
    "build_prompt",
    "build_reward_funcs",
    "clp_reward",
    "count_tool_calls",
    "final_report",
    "grpo_examples_from_episodes",
    "grpo_examples_from_rollouts",
    "load_grpo_dataset",
    "load_jsonl",
    "run_grpo",
    "to_dataset",
    "write_jsonl",
]
