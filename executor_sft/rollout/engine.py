"""The collection engine in one process: episodes for every (question, sample), counterfactual re-runs, resume.

The engine is I/O bound, so it keeps `concurrency` episodes in flight on one event loop; each
episode runs its sub-queries and executor roles concurrently as well. Model calls are awaited,
retrieval runs in worker threads (`Retriever.asearch`) and the durable write of a finished
episode runs in a thread too, so nothing blocks the loop. A finished episode is written with
its counterfactual runs in one record, so a kill never leaves half-labelled work behind, and
a restart skips every episode id already in the file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from executor_sft.agents.config import PipelineConfig
from executor_sft.agents.pipeline import (
    add_outcome_usage,
    episode_config_record,
    run_counterfactual,
    run_episode,
)
from executor_sft.data import select_questions as select_sources
from executor_sft.errors import ConfigError
from executor_sft.filters.predicates import is_correct
from executor_sft.llm.base import ChatModel
from executor_sft.llm.request_cache import RequestCache, cache_models, model_identity
from executor_sft.metrics.judge import LLMJudge
from executor_sft.retrieval.base import Retriever
from executor_sft.rollout.config import CollectConfig, CounterfactualConfig
from executor_sft.rollout.store import EpisodeStore, read_episodes
from executor_sft.rollout.summary import CollectionStats, collection_stats, render_summary
from executor_sft.schema import Episode, Question, Role, Usage
from executor_sft.schema import episode_id as make_episode_id

logger = logging.getLogger(__name__)

COUNTERFACTUAL_ANSWERER_USAGE = Role.ANSWERER_OUTCOMES
_CORRECTNESS_FIELDS = {"run_id", "role", "round", "sub_query_index", "n_searches", "finish", "outcome"}
MERGE_CHUNK = 256
"""Records per write + fsync when merging (an fsync per record made merging slower than collecting)."""


@dataclass
class CollectResult:
    path: Path
    written: int
    skipped: int
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(episode_id, error) for episodes that raised; they are not written and a re-run retries them."""
    summary: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    timings: dict[str, Any] = field(default_factory=dict)
    """`collect_parallel` only: merge seconds and per-worker CPU seconds."""
    stats: CollectionStats | None = None
    """What `summary` was made from (the whole file)."""


def select_questions(config: CollectConfig) -> list[Question]:
    """The question set of this config and shard (round-robin over the file order).

    `executor_sft.data.select_questions` over `config.questions` (collection's defaults: repeated
    ids dropped, `limit` for the whole source), then this shard's share.
    """
    questions = select_sources([config.questions])
    return questions[config.shard_index :: config.num_shards]


async def add_counterfactuals(
    episode: Episode,
    models: Mapping[str, ChatModel],
    retriever: Retriever,
    pipeline: PipelineConfig,
    settings: CounterfactualConfig,
    judge: LLMJudge | None,
) -> int:
    """Re-run every correct multi-search run of `settings.role` with a smaller budget; return how many.

    `pipeline` is the config the episode ran with (in separate collection: `for_driver(...)`);
    its `outcome.mode` decides how the re-runs are labelled (replay uses `models`' backbone and driver).
    """
    if not settings.enabled:
        return 0
    require_judge = settings.require_judge if settings.require_judge is not None else judge is not None
    targets = [
        run
        for run in episode.runs
        if run.role == settings.role
        and run.counterfactual_of is None
        and run.n_searches >= settings.min_searches
        # only the fields correctness reads: dumping whole runs (every call record) was a hot spot
        and is_correct(run.model_dump(mode="json", include=_CORRECTNESS_FIELDS), require_judge=require_judge)
    ]
    new_runs = await asyncio.gather(
        *(
            run_counterfactual(
                episode,
                run,
                models[settings.role],
                retriever,
                models[Role.ANSWERER],
                config=pipeline,
                judge=judge,
                max_searches=settings.max_searches,
                models=models,
            )
            for run in targets
        )
    )
    for run in new_runs:
        episode.runs.append(run)
        episode.usage.setdefault(run.role, Usage()).add(run.usage)
        add_outcome_usage(episode, run.outcome)
    return len(new_runs)


def build_models(config: CollectConfig) -> dict[str, ChatModel]:
    """The config's models through `ModelPool`: roles with identical settings share one model
    object (one copy of in-process weights); with `config.llm_cache` (default) each is wrapped
    in a `CachedChatModel` over `config.llm_cache_file()`."""
    from executor_sft.llm.pool import ModelPool

    missing = [r for r in config.required_roles() if r not in config.models]
    if missing:
        raise ConfigError(f"config.models has no entry for role(s) {missing}")
    models = ModelPool().build(config.models)
    cache_file = config.llm_cache_file()
    if cache_file is None:
        return models
    # Greedy requests answered before (a resumed run) are replayed, not sent again; the judge
    # keeps its own verdict cache.
    keys = {role: model_identity(cfg) for role, cfg in config.models.items()}
    return cache_models(models, RequestCache(cache_file), skip_roles=(Role.JUDGE,), model_keys=keys)


def _postfix(stats: CollectionStats, failed: int) -> dict[str, str]:
    tokens = {role: s.tokens for role, s in stats.roles.items() if s.tokens}
    shown = {role: f"{t / 1000:.0f}k" for role, t in sorted(tokens.items())}
    runs = sum(s.runs for s in stats.roles.values())
    return {"runs": str(runs), **shown, "errors": str(stats.episode_errors + failed)}


async def collect_in_process(
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
    """`collect` in this process (what each worker of `collect_parallel` runs)."""
    start = time.perf_counter()
    models = dict(models) if models is not None else build_models(config)
    missing = [r for r in config.required_roles() if r not in models]
    if missing:
        raise ValueError(f"no model for role(s) {missing}")
    if retriever is None:
        from executor_sft.retrieval.config import build_retriever

        retriever = build_retriever(config.retriever)
    if judge is None and Role.JUDGE in models:
        # Verdicts persist beside the rollouts, so a resumed or repeated run never re-judges.
        cache = config.rollouts_path.with_name(config.rollouts_path.stem + ".judge_cache.jsonl")
        cache.parent.mkdir(parents=True, exist_ok=True)
        judge = LLMJudge(models[Role.JUDGE], cache_path=cache)
    questions = list(questions) if questions is not None else select_questions(config)

    store = EpisodeStore(config.rollouts_path)
    skip = set(skip_ids)
    keys = config.episode_keys(questions)
    todo = [(q, s, d) for q, s, d, eid in keys if eid not in store and eid not in skip]
    skipped = len(keys) - len(todo)
    # The summary covers the whole file: what a previous run left there, plus what this run writes.
    stats = (
        collection_stats(Episode.model_validate(e) for e in read_episodes(store.path))
        if len(store)
        else CollectionStats()
    )
    # The same for every episode of this collection (of one driver): dumped once, not per episode.
    pipelines = {d: config.pipeline if d is None else config.pipeline.for_driver(d) for d in config.drivers()}
    config_records = {d: episode_config_record(p, models, retriever, judge) for d, p in pipelines.items()}
    written = 0
    failed: list[tuple[str, str]] = []
    queue: asyncio.Queue[tuple[Question, int, str | None]] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)
    finished: asyncio.Queue[Episode | None] = asyncio.Queue()
    bar = tqdm(
        **{"total": len(todo), "desc": "episodes", "unit": "ep", "dynamic_ncols": True, **(progress or {})},
        disable=not show_progress,
    )

    async def worker() -> None:
        while True:
            try:
                question, sample, driver = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            episode_id = make_episode_id(question.id, sample, driver)
            pipeline = pipelines[driver]
            try:
                episode = await run_episode(
                    question,
                    models,
                    retriever,
                    pipeline,
                    sample_index=sample,
                    judge=judge,
                    config_record=config_records[driver],
                    separate=driver is not None,
                )
                await add_counterfactuals(episode, models, retriever, pipeline, config.counterfactual, judge)
            except Exception as exc:  # a bug or an outage: keep going, leave it for the resume
                logger.warning("episode %s failed: %s: %s", episode_id, type(exc).__name__, exc)
                failed.append((episode_id, f"{type(exc).__name__}: {exc}"))
                bar.update(1)
                continue
            finished.put_nowait(episode)

    async def writer() -> None:
        """Group commit: write every episode finished since the last write with one fsync."""
        nonlocal written
        while True:
            batch = [await finished.get()]
            while not finished.empty():
                batch.append(finished.get_nowait())
            episodes = [e for e in batch if e is not None]
            if episodes:
                try:
                    written += await asyncio.to_thread(store.append_many, episodes)
                except Exception as exc:  # e.g. disk full: not written, so a re-run redoes them
                    logger.warning(
                        "writing %d episodes failed: %s: %s", len(episodes), type(exc).__name__, exc
                    )
                    failed.extend((e.episode_id, f"write: {type(exc).__name__}: {exc}") for e in episodes)
                else:
                    for episode in episodes:
                        stats.add(episode)
                bar.update(len(episodes))
                if show_progress:
                    bar.set_postfix(_postfix(stats, len(failed)), refresh=False)
            if None in batch:
                return

    writing = asyncio.create_task(writer())
    try:
        await asyncio.gather(*(worker() for _ in range(min(config.concurrency, max(1, len(todo))))))
    finally:
        finished.put_nowait(None)
        await writing
        bar.close()
        store.close()

    return finish_collection(config, stats, written, skipped, failed, elapsed_s=time.perf_counter() - start)


def finish_collection(
    config: CollectConfig,
    stats: CollectionStats,
    written: int,
    skipped: int,
    failed: list[tuple[str, str]],
    *,
    elapsed_s: float,
    summary_extra: dict[str, Any] | None = None,
    **result_fields: Any,
) -> CollectResult:
    """Write `<rollouts>.summary.json` and build the result (shared by one- and multi-process runs)."""
    summary = stats.to_dict()
    summary.update(written=written, skipped=skipped, failed=len(failed), **(summary_extra or {}))
    summary_path = config.rollouts_path.with_name(config.rollouts_path.stem + ".summary.json")
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return CollectResult(
        path=config.rollouts_path,
        written=written,
        skipped=skipped,
        failed=failed,
        summary=summary,
        elapsed_s=elapsed_s,
        stats=stats,
        **result_fields,
    )


def format_result(result: CollectResult) -> str:
    lines = [
        render_summary(result.summary),
        f"wrote {result.written} episodes to {result.path} in {result.elapsed_s:.1f}s "
        f"({result.skipped} already done, {len(result.failed)} failed and left for a re-run)",
    ]
    lines += [f"  failed {eid}: {err}" for eid, err in result.failed[:10]]
    return "\n".join(lines)


def merge_rollouts(inputs: Sequence[str | Path], output: str | Path) -> tuple[int, int]:
    """Merge shard files into one; returns (written, duplicates skipped). Resumable."""
    written = seen = 0
    with EpisodeStore(output) as store:
        for path in inputs:
            chunk: list[dict[str, Any]] = []
            for record in read_episodes(path):
                chunk.append(record)
                if len(chunk) == MERGE_CHUNK:
                    written += store.append_many(chunk)
                    seen, chunk = seen + len(chunk), []
            written += store.append_many(chunk)
            seen += len(chunk)
    return written, seen - written
