"""`engine: ray`: collection over Ray actors, the driver the only writer of the rollouts file.

Each actor builds the config's models and retriever on its own node, so what a node needs is
the config (sent through Ray) and whatever the config points at locally: the index directory
at the same path on every node, like vLLM's model weights, and the model endpoints it can
reach. The driver's request cache and judge cache stay on the driver's disk: actors keep a
judge cache in a scratch directory of their own and no request cache (there is no shared
filesystem to keep one in), so a resumed Ray collection re-sends the calls of episodes it had
not finished.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Sequence

from executor_sft.agents.calls import INFRASTRUCTURE_ERRORS
from executor_sft.llm.config import api_keys
from executor_sft.llm.routing import merge_replica_counts, replica_counts
from executor_sft.ray_runner import ActorWork, run_episodes_ray
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import CollectResult, episode_work, finish_run, prior_stats, select_questions
from executor_sft.rollout.summary import CollectionStats, collection_stats
from executor_sft.runtime import ModelsFactory, RetrieverFactory
from executor_sft.schema import Episode, Question


def _episode_stats(episode: Episode) -> CollectionStats:
    return collection_stats([episode])


def actor_work(
    config_json: str, models: ModelsFactory | None, retriever: RetrieverFactory | None
) -> ActorWork:
    """Runs on the actor: build the runtime (models, retriever, judge) there, and the episode function."""
    scratch = tempfile.mkdtemp(prefix="executor_sft_collect_")
    config = CollectConfig.model_validate_json(config_json).model_copy(
        update={"output_dir": scratch, "llm_cache": False, "num_shards": 1, "shard_index": 0}
    )
    runtime = config.runtime(models=models, retriever=retriever)
    run_one, give_up = episode_work(config, runtime)
    return ActorWork(
        run_one,
        give_up,
        INFRASTRUCTURE_ERRORS,
        digest=_episode_stats,
        snapshot=functools.partial(replica_counts, runtime.models),
    )


async def collect_on_ray(
    config: CollectConfig,
    *,
    questions: Sequence[Question] | None = None,
    show_progress: bool = True,
    models: ModelsFactory | None = None,
    retriever: RetrieverFactory | None = None,
    judge: None = None,
) -> CollectResult:
    """Collect `config` on the Ray cluster `config.ray` names into `config.rollouts_path`; each actor
    builds its runtime from the config, or from the picklable factories `models` and `retriever`."""
    for name, given in (("models", models), ("retriever", retriever), ("judge", judge)):
        if given is not None and (name == "judge" or not callable(given)):
            raise ValueError(
                f"engine ray builds models and retriever where it runs, from the config; to use "
                f"objects of your own, pass a picklable factory as {name}"
            )
    start = time.perf_counter()
    with config.open_store() as store:
        questions = list(questions) if questions is not None else select_questions(config)
        factory = functools.partial(actor_work, config.model_dump_json(), models, retriever)
        stats = prior_stats(store)
        report = await run_episodes_ray(
            config.work_items(questions),
            factory,
            store,
            config.ray,
            concurrency=config.concurrency,
            on_written=stats.merge,
            progress={"desc": "episodes (ray)", "dynamic_ncols": True} if show_progress else None,
            max_attempts=config.max_attempts,
            attempts_file=config.attempts_file(),
            env=api_keys(config.models.values()),
        )
        extra = {"engine": "ray", "actors": report.actors}
        if report.lost_actors:
            extra.update(lost_actors=report.lost_actors, requeued=report.requeued)
        if replicas := merge_replica_counts(report.snapshots.values()):
            extra["replicas"] = replicas  # each actor routes over its own pools: their counts summed
        return finish_run(
            config,
            stats,
            report,
            start=start,
            summary_extra=extra,
            timings={"per_node": report.per_node, "window_s": report.finished_at - report.started_at},
        )
