"""Rollout collection: episodes per question, counterfactual re-runs, crash-safe store, shards."""

from executor_sft.rollout.collect import (
    CollectResult,
    add_counterfactuals,
    collect,
    format_result,
    merge_rollouts,
    select_questions,
)
from executor_sft.rollout.config import (
    CollectConfig,
    CounterfactualConfig,
    QuestionSource,
    load_collect_config,
)
from executor_sft.rollout.parallel import collect_parallel, merge_parts
from executor_sft.rollout.store import EpisodeStore, read_episodes, recover_jsonl
from executor_sft.rollout.summary import CollectionStats, collection_stats, render_summary

__all__ = [
    "CollectConfig",
    "CollectResult",
    "CollectionStats",
    "CounterfactualConfig",
    "EpisodeStore",
    "QuestionSource",
    "add_counterfactuals",
    "collect",
    "collect_parallel",
    "collection_stats",
    "format_result",
    "load_collect_config",
    "merge_parts",
    "merge_rollouts",
    "read_episodes",
    "recover_jsonl",
    "render_summary",
    "select_questions",
]
