"""`collect`: the one entry point of collection; the config's engine (`ENGINES`) says where it runs."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from executor_sft.llm.base import ChatModel
from executor_sft.metrics.judge import LLMJudge
from executor_sft.retrieval.base import Retriever
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import (
    CollectInputs,
    CollectResult,
    ModelsFactory,
    RetrieverFactory,
    add_counterfactuals,
    collect_in_process,
    collection_models,
    finish_collection,
    format_result,
    merge_rollouts,
    select_questions,
)
from executor_sft.rollout.engines import ENGINES
from executor_sft.schema import Question

__all__ = [
    "CollectResult",
    "ENGINES",
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
    models_factory: ModelsFactory | None = None,
    retriever_factory: RetrieverFactory | None = None,
) -> CollectResult:
    """Collect `samples_per_question` episodes per question into `config.rollouts_path`.

    `models`, `retriever` and `questions` default to what the config describes; pass them to
    drive collection with objects you built yourself (scripted policies, a shared server).
    Episode ids in `skip_ids` are treated as done (`collect_parallel` passes what the merged
    file already holds); `progress` adds tqdm arguments. The config's engine
    (`config.engine_name()`, looked up in `ENGINES`) decides where episodes run; engines that
    run in other processes or on other machines (process, ray) build models and retriever there,
    from the config or from the picklable `models_factory(questions)` / `retriever_factory()`.
    """
    engine = ENGINES.get(config.engine_name())
    inputs = CollectInputs(
        models=models,
        retriever=retriever,
        judge=judge,
        questions=questions,
        models_factory=models_factory,
        retriever_factory=retriever_factory,
        show_progress=show_progress,
        skip_ids=skip_ids,
        progress=progress,
    )
    return await engine(config, inputs)
