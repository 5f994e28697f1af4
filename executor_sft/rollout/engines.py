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
from collections.abc import Awaitable, Callable

from executor_sft.registry import Registry
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import CollectInputs, CollectResult, collect_in_process
from executor_sft.rollout.parallel import collect_parallel

Engine = Callable[[CollectConfig, CollectInputs], Awaitable[CollectResult]]
ENGINES: Registry[Engine] = Registry("collection engine")


ENGINES.register("in_process", collect_in_process)


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
