"""Rollout collection: episodes per question, counterfactual re-runs, resume, shards and Ray."""

from executor_sft.rollout.collect import ENGINES, collect
from executor_sft.rollout.config import (
    CollectConfig,
    CollectQuestionSource,
    CounterfactualConfig,
    load_collect_config,
)
from executor_sft.rollout.engine import (
    CollectResult,
    format_result,
    merge_rollouts,
    select_questions,
)
from executor_sft.rollout.summary import CollectionStats, collection_stats, render_summary

__all__ = [
    "ENGINES",
    "CollectConfig",
    "CollectQuestionSource",
    "CollectResult",
    "CollectionStats",
    "CounterfactualConfig",
    "collect",
    "collection_stats",
    "format_result",
    "load_collect_config",
    "merge_rollouts",
    "render_summary",
    "select_questions",
]
