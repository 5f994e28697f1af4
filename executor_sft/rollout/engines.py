"""`ENGINES`: how a collection runs, by name (`CollectConfig.engine`).

`in_process` runs every episode on one event loop; `process` splits the questions over
`num_workers` spawned processes and merges their part files (`collect_parallel`); `ray` runs
them on actors over a Ray cluster and streams episodes back to this process
(`executor_sft.rollout.ray_engine`). An engine of your own registers the same way, or is named
by its import path.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from executor_sft.llm.base import ChatModel
from executor_sft.metrics.judge import LLMJudge
from executor_sft.registry import Registry
from executor_sft.retrieval.base import Retriever
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import CollectResult, collect_in_process
from executor_sft.rollout.parallel import ModelsFactory, RetrieverFactory, collect_parallel
from executor_sft.schema import Question


@dataclass
class CollectInputs:
    """What a caller of `collect` may hand an engine instead of what the config describes.

    Objects (`models`, `retriever`, `judge`) serve one process; engines that run elsewhere take
    picklable factories (`models_factory(questions)`, `retriever_factory()`) instead."""

    models: Mapping[str, ChatModel] | None = None
    retriever: Retriever | None = None
    judge: LLMJudge | None = None
    questions: Sequence[Question] | None = None
    models_factory: ModelsFactory | None = None
    retriever_factory: RetrieverFactory | None = None
    show_progress: bool = True
    skip_ids: Collection[str] = ()
    progress: Mapping[str, Any] | None = None

    def objects_given(self) -> bool:
        return self.models is not None or self.retriever is not None or self.judge is not None


Engine = Callable[[CollectConfig, CollectInputs], Awaitable[CollectResult]]
ENGINES: Registry[Engine] = Registry("collection engine")


@ENGINES.register("in_process")
async def in_process(config: CollectConfig, inputs: CollectInputs) -> CollectResult:
    models = inputs.models
    if models is None and inputs.models_factory is not None:
        questions = list(inputs.questions) if inputs.questions is not None else []
        models = inputs.models_factory(questions)
    retriever = inputs.retriever
    if retriever is None and inputs.retriever_factory is not None:
        retriever = inputs.retriever_factory()
    return await collect_in_process(
        config,
        models=models,
        retriever=retriever,
        judge=inputs.judge,
        questions=inputs.questions,
        show_progress=inputs.show_progress,
        skip_ids=inputs.skip_ids,
        progress=inputs.progress,
    )


def _objects_refused(engine: str, inputs: CollectInputs) -> None:
    if inputs.objects_given():
        raise ValueError(
            f"engine {engine} builds models and retriever where it runs, from the config; "
            "to use objects of your own, pass picklable models_factory / retriever_factory"
        )


@ENGINES.register("process")
async def process(config: CollectConfig, inputs: CollectInputs) -> CollectResult:
    _objects_refused("process", inputs)
    stop = threading.Event()
    try:
        return await asyncio.to_thread(
            collect_parallel,
            config,
            models_factory=inputs.models_factory,
            retriever_factory=inputs.retriever_factory,
            questions=inputs.questions,
            show_progress=inputs.show_progress,
            stop=stop,
        )
    except asyncio.CancelledError:  # Ctrl-C: the workers stop too, and asyncio.run waits for them
        stop.set()
        raise


@ENGINES.register("ray")
async def ray(config: CollectConfig, inputs: CollectInputs) -> CollectResult:
    from executor_sft.rollout.ray_engine import collect_on_ray

    _objects_refused("ray", inputs)
    return await collect_on_ray(
        config,
        questions=inputs.questions,
        models_factory=inputs.models_factory,
        retriever_factory=inputs.retriever_factory,
        show_progress=inputs.show_progress,
        skip_ids=list(inputs.skip_ids),
    )
