"""`collect`: the one entry point of collection, in this process or in `num_workers` processes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from executor_sft.llm.base import ChatModel
from executor_sft.metrics.judge import LLMJudge
from executor_sft.retrieval.base import Retriever
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import (
    CollectResult,
    add_counterfactuals,
    collect_in_process,
    collection_models,
    finish_collection,
    format_result,
    merge_rollouts,
    select_questions,
)
from executor_sft.rollout.parallel import collect_parallel
from executor_sft.schema import Question

__all__ = [
    "CollectResult",
    "add_counterfactuals",
    "collection_models",
    "collect",
    "collect_in_process",
    "finish_collection",
    "format_result",
    "merge_rollouts",
    "select_questions",
]


async def collect(
    config: CollectConfig,
    *,
    models: Mapping[str, ChatModel] | None = None,
    retriever: Retriever | None = None,
    judge: LLMJudge | None = None,
    questions: Sequence[Question] | None = None,
    show_progress: bool = True,
    skip_ids: Collection[str] = (),
    progress: Mapping[str, Any] | None = None,
) -> CollectResult:
    """Collect `samples_per_question` episodes per question into `config.rollouts_path`.

    `models`, `retriever` and `questions` default to what the config describes; pass them to
    drive collection with objects you built yourself (scripted policies, a shared server).
    Episode ids in `skip_ids` are treated as done (`collect_parallel` passes what the merged
    file already holds); `progress` adds tqdm arguments. With `config.num_workers > 1` the
    work runs in that many processes (`collect_parallel`), which build their own models and
    retriever from the config.
    """
    if config.num_workers > 1:
        if models is not None or retriever is not None or judge is not None:
            raise ValueError(
                "num_workers > 1 builds models and retriever in each worker process from the config; "
                "to use objects of your own, call collect_parallel with picklable factories"
            )
        stop = threading.Event()
        try:
            return await asyncio.to_thread(
                collect_parallel, config, questions=questions, show_progress=show_progress, stop=stop
            )
        except asyncio.CancelledError:  # Ctrl-C: the workers stop too, and asyncio.run waits for them
            stop.set()
            raise
    return await collect_in_process(
        config,
        models=models,
        retriever=retriever,
        judge=judge,
        questions=questions,
        show_progress=show_progress,
        skip_ids=skip_ids,
        progress=progress,
    )
