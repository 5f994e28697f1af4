"""Optional GRPO stage: named weighted rewards (outcome, CLP), search environment for TRL's GRPOTrainer, data from rollouts."""

from executor_sft.grpo.arguments import ExecutorDataArguments, load_prompt_dataset
from executor_sft.grpo.data import (
    GRPODataReport,
    build_prompt,
    grpo_examples_from_episodes,
    grpo_examples_from_questions,
    grpo_examples_from_rollouts,
    load_jsonl,
    to_dataset,
    write_jsonl,
)
from executor_sft.grpo.environment import SearchEnvironment, SearchEnvironmentFactory
from executor_sft.grpo.outcome import OUTCOME_COLUMNS, OutcomeReward
from executor_sft.grpo.policy import load_policy
from executor_sft.grpo.reward_funcs import build_reward_funcs
from executor_sft.grpo.rewards import (
    DEFAULT_EPS,
    DEFAULT_GROUNDING_SCORE,
    REWARDS,
    CLPReward,
    JudgeCLPReward,
    JudgeFn,
    RewardFactory,
    RewardFunc,
    clp_reward,
    count_tool_calls,
    final_report,
    grounded,
)
from executor_sft.grpo.train import GRPOScriptArguments, build_grpo_trainer, run_grpo

__all__ = [
    "DEFAULT_EPS",
    "DEFAULT_GROUNDING_SCORE",
    "ExecutorDataArguments",
    "OUTCOME_COLUMNS",
    "REWARDS",
    "CLPReward",
    "GRPODataReport",
    "GRPOScriptArguments",
    "JudgeCLPReward",
    "JudgeFn",
    "OutcomeReward",
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
    "grpo_examples_from_questions",
    "grounded",
    "grpo_examples_from_rollouts",
    "load_prompt_dataset",
    "load_jsonl",
    "load_policy",
    "run_grpo",
    "to_dataset",
    "write_jsonl",
]
