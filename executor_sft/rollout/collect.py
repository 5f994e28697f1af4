"""`collect`: the one entry point of collection; the config's engine (`ENGINES`) says where it runs.

`in_process` runs every episode on one event loop here; `ray` runs them on actors over a Ray
cluster and streams episodes back to this process (`executor_sft.rollout.ray_engine`). An
engine of your own registers the same way, or is named by its import path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from executor_sft.llm.base import ChatModel
from executor_sft.metrics.judge import LLMJudge
from executor_sft.registry import Registry
from executor_sft.retrieval.base import Retriever
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import CollectResult, collect_in_process
from executor_sft.runtime import ModelsFactory, RetrieverFactory
from executor_sft.schema import Question

Engine = Callable[..., Awaitable[CollectResult]]
"""`engine(config, questions=..., show_progress=..., models=..., retriever=..., judge=...)`."""
ENGINES: Registry[Engine] = Registry("collection engine")
ENGINES.register("in_process", collect_in_process)


@ENGINES.register("ray")
async def ray(config: CollectConfig, **kwargs) -> CollectResult:
    from executor_sft.rollout.ray_engine import collect_on_ray

    return await collect_on_ray(config, **kwargs)


def collect(
    config: CollectConfig,
    *,
    models: Mapping[str, ChatModel] | ModelsFactory | None = None,
    retriever: Retriever | RetrieverFactory | None = None,
    judge: LLMJudge | None = None,
    questions: Sequence[Question] | None = None,
    show_progress: bool = True,
) -> Awaitable[CollectResult]:
    """Collect `samples_per_question` episodes per question into `config.rollouts_path` (await it).

    `models`, `retriever`, `judge` and `questions` default to what the config describes; pass
    them to drive collection with objects you built yourself (scripted policies, a shared
    server). Engines that run on other machines (ray) build models and retriever there, from
    the config or from picklable factories passed as `models` / `retriever`.
    """
    engine = ENGINES.get(config.engine)
    return engine(
        config,
        questions=questions,
        show_progress=show_progress,
        models=models,
        retriever=retriever,
        judge=judge,
    )
