"""Collection over several worker processes: one event loop per core, then one merged file.

One event loop runs the engine's Python (records, parsing, JSON, BM25 hand-off) on one core,
so a CPU-bound collection (hundreds of episodes in flight against fast endpoints) scales
with processes, not with concurrency. `collect_parallel` splits the config's questions
round-robin over `workers` spawned processes; each runs the ordinary in-process collection (`collect_in_process`) with
`concurrency / workers` episodes in flight into its own part file under
`<output_dir>/.<stem>.workers/`, and the parent merges the parts into `config.rollouts_path`
(duplicates skipped, one fsync per chunk) and deletes them.

Resume: episodes already in the merged file are skipped by every worker; part files left by
a killed run are merged before new work starts. Each worker builds its own models and
retriever (from the config, or from the picklable factories given), so local weights are
loaded once per process.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.engine import (
    CollectInputs,
    ModelsFactory,
    RetrieverFactory,
    build_models_and_retriever,
    collect_in_process,
    finish_collection,
    merge_into,
    select_questions,
)
from executor_sft.rollout.summary import CollectionStats, collection_stats
from executor_sft.schema import EPISODE_SCHEMA, Question
from executor_sft.store import (
    EpisodeStore,
    SystemChangedError,
    read_episode_models,
    read_system,
    system_changes,
)

PARENT_POLL_S = 0.2
"""How often a worker checks that its parent is alive."""
STOP_POLL_S = 0.2
"""How often the parent checks its workers (and whether it was asked to stop)."""
STOP_GRACE_S = 2.0
"""After the parent is interrupted, how long its workers have to stop on their own before it sends SIGINT."""


def parts_dir(config: CollectConfig) -> Path:
    return config.rollouts_path.with_name(f".{config.rollouts_path.stem}.workers")


def _worker_config(config: CollectConfig, index: int, workers: int) -> CollectConfig:
    out = parts_dir(config) / f"{index:03d}-of-{workers:03d}"
    concurrency = max(1, -(-config.concurrency // workers))
    # One shard of one: the part file is always `rollouts.jsonl` in the worker's directory.
    return config.model_copy(
        update={
            "output_dir": str(out),
            "concurrency": concurrency,
            "num_shards": 1,
            "shard_index": 0,
            "num_workers": 1,
            # every worker reads and appends the one request cache beside the merged rollouts
            "llm_cache_path": str(cache) if (cache := config.llm_cache_file()) else None,
            # and records failed attempts in the one log beside them, so the bound holds across resumes
            "attempts_path": str(config.attempts_file()),
        }
    )


@dataclass
class _Part:
    """One worker's share of a collection, as the spawned process receives it."""

    config_json: str
    questions: list[Question]
    skip_ids: set[str]
    models_factory: ModelsFactory | None
    retriever_factory: RetrieverFactory | None
    barrier: Any
    index: int
    show_progress: bool


def _worker_main(parent: int, part: _Part, results: Any) -> None:
    """Runs in a spawned process: build models and retriever, wait for the others, collect.

    The worker ends with its parent (`_exit_with_parent`); on SIGINT (Ctrl-C reaches the whole
    process group, or the parent passes its own on) it stops quietly and reports that it was
    interrupted: what it wrote is in its part file, which the next run merges.
    """
    _exit_with_parent(parent)
    try:
        results.put(_collect_part(part))
    except KeyboardInterrupt:
        part.barrier.abort()
        results.put({"index": part.index, "interrupted": True})
        sys.exit(130)
    except BaseException as exc:
        part.barrier.abort()
        error = str(exc) if isinstance(exc, _StartUpError) else f"{type(exc).__name__}: {exc}"
        results.put({"index": part.index, "error": error})
        raise


class _StartUpError(RuntimeError):
    """A worker could not build its models or retriever."""


def _exit_with_parent(parent: int) -> None:
    """Exit as soon as the parent is gone: a SIGTERM or SIGKILL to it runs none of its clean-up, and
    a worker left running would go on spending endpoint time on work nobody merges (its part file
    stays valid: the next run merges it)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(143)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _collect_part(part: _Part) -> dict[str, Any]:
    """One worker's collection into its part file, and the report the parent merges it by."""
    config = CollectConfig.model_validate_json(part.config_json)
    questions, skip_ids = part.questions, part.skip_ids
    try:
        models, retriever = build_models_and_retriever(
            config, questions, part.models_factory, part.retriever_factory
        )
    except Exception as exc:
        raise _StartUpError(f"start-up: {type(exc).__name__}: {exc}") from exc
    part.barrier.wait()  # loading is start-up cost; the timed window starts when every worker is ready
    t0 = time.time()
    cpu0 = time.process_time()
    result = asyncio.run(
        collect_in_process(
            config,
            CollectInputs(
                models=models,
                retriever=retriever,
                questions=questions,
                skip_ids=skip_ids,
                show_progress=part.show_progress,
                progress={"desc": f"worker {part.index}", "position": part.index},
            ),
        )
    )
    # The part file was created by this run, so it holds exactly the episodes written now.
    failed = {eid for eid, _ in result.failed}
    keys = {item.episode_id for item in config.work_items(questions)}
    keys -= skip_ids | failed | set(result.not_started)
    return {
        "index": part.index,
        "written": result.written,
        "skipped": result.skipped,
        "failed": result.failed,
        "gave_up": result.gave_up,
        "not_started": result.not_started,
        "keys": keys,
        "stats": result.stats,
        "path": str(config.rollouts_path),
        "t0": t0,
        "t1": time.time(),
        "cpu_s": time.process_time() - cpu0,
    }


def merge_parts(config: CollectConfig, store: EpisodeStore) -> tuple[int, int]:
    """Merge every part file left under `parts_dir(config)` into `store` (the rollouts), then delete them.

    A part that records another system than the store's (left by a killed run of an edited
    config) is refused as a resume onto the rollouts file itself would be.
    """
    root = parts_dir(config)
    parts = sorted(root.glob("*/rollouts.jsonl")) if root.exists() else []
    written = duplicates = 0
    if parts:
        if store.system is not None and not config.accept_system_change:
            for part in parts:
                _check_part(part, store.system, root)
        written, duplicates = merge_into(store, parts)
    shutil.rmtree(root, ignore_errors=True)
    return written, duplicates


def _check_part(part: Path, system: dict[str, Any], root: Path) -> None:
    fingerprint = read_system(part)
    changes = system_changes(fingerprint, {"schema": EPISODE_SCHEMA, **system}) if fingerprint else []
    if changes:
        raise SystemChangedError(
            f"{part}: left by a killed run of another system (changed: {'; '.join(changes[:4])}); "
            f"finish it with that config, or delete {root} to drop its episodes"
        )


def collect_parallel(
    config: CollectConfig,
    workers: int | None = None,
    *,
    models_factory: ModelsFactory | None = None,
    retriever_factory: RetrieverFactory | None = None,
    questions: Sequence[Question] | None = None,
    show_progress: bool = True,
    stop: threading.Event | None = None,
):
    """Collect with `workers` processes (default `config.num_workers`) and merge into `config.rollouts_path`.

    Setting `stop` (from another thread) interrupts the workers; what they finished is merged and
    KeyboardInterrupt is raised.

    Returns a `CollectResult` whose `elapsed_s` is the collection window (from when every
    worker has loaded its models and index to when the last one finishes) and whose summary
    covers the merged file; `timings` adds the merge time and per-worker CPU seconds.
    """
    workers = workers or config.num_workers
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    questions = list(questions) if questions is not None else select_questions(config)
    with config.open_store() as store:
        merge_parts(config, store)  # parts a killed run left behind
        done = store.completed_ids()
        prior = collection_stats(read_episode_models(store.path)) if done else CollectionStats()
        try:
            reports = _run_workers(
                config, workers, questions, done, models_factory, retriever_factory, show_progress, stop
            )
        except KeyboardInterrupt:
            merge_parts(config, store)  # the workers committed what they finished before they stopped
            raise
        t_merge = time.perf_counter()
        stats = _merge_reports(config, store, reports, prior)
        merge_s = time.perf_counter() - t_merge
        return finish_collection(
            config,
            stats,
            sum(r["written"] for r in reports),
            sum(r["skipped"] for r in reports),
            [tuple(f) for r in reports for f in r["failed"]],
            elapsed_s=max(r["t1"] for r in reports) - min(r["t0"] for r in reports),
            summary_extra={"workers": workers},
            timings={"merge_s": merge_s, "worker_cpu_s": [r["cpu_s"] for r in reports]},
            gave_up=[tuple(g) for r in reports for g in r["gave_up"]],
            not_started=[eid for r in reports for eid in r["not_started"]],
        )


def _run_workers(
    config: CollectConfig,
    workers: int,
    questions: list[Question],
    done: set[str],
    models_factory: ModelsFactory | None,
    retriever_factory: RetrieverFactory | None,
    show_progress: bool,
    stop: threading.Event | None = None,
) -> list[dict[str, Any]]:
    """Start the workers, wait for every report; raise if one failed or died.

    Once `stop` is set (the caller was interrupted) every worker gets SIGINT and stops after
    committing what it finished; a worker that was interrupted makes this raise KeyboardInterrupt."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = []
    for i in range(workers):
        mine = questions[i::workers]
        ids = {item.episode_id for item in config.work_items(mine)} & done
        part = _Part(
            _worker_config(config, i, workers).model_dump_json(),
            mine,
            ids,
            models_factory,
            retriever_factory,
            barrier,
            i,
            show_progress,
        )
        args = (os.getpid(), part, results)
        proc = ctx.Process(target=_worker_main, args=args, name=f"collect-worker-{i}", daemon=True)
        proc.start()
        procs.append(proc)
    try:
        reports = _wait_for_reports(procs, results, stop)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    if any(r.get("interrupted") for r in reports):
        raise KeyboardInterrupt
    errors = [r for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"collect worker {errors[0]['index']} failed: {errors[0]['error']}")
    return reports


def _wait_for_reports(procs: list[Any], results: Any, stop: threading.Event | None) -> list[dict[str, Any]]:
    """One report per worker; raise if one died without reporting.

    Once `stop` is set, a worker still running `STOP_GRACE_S` later gets SIGINT (a Ctrl-C at a
    terminal reaches the workers itself; a second SIGINT would cut their clean-up short)."""
    reports: list[dict[str, Any]] = []
    stop_at: float | None = None
    while len(reports) < len(procs):
        if stop is not None and stop.is_set() and stop_at is None:
            stop_at = time.monotonic() + STOP_GRACE_S
        if stop_at is not None and time.monotonic() > stop_at:
            stop_at = float("inf")
            for proc in procs:
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGINT)
        try:
            reports.append(results.get(timeout=STOP_POLL_S))
        except Exception:  # queue.Empty: check nobody died without reporting
            dead = [p for p in procs if p.exitcode is not None and p.exitcode != 0]
            if dead and results.empty():
                raise RuntimeError(
                    f"collect worker {dead[0].name} exited with code {dead[0].exitcode}"
                ) from None
    return reports


def _merge_reports(
    config: CollectConfig, store: EpisodeStore, reports: list[dict[str, Any]], prior: CollectionStats
) -> CollectionStats:
    """Append the workers' part files to the store and add up their stats.

    The fast path copies the part files' bytes (one write + fsync); it is taken only when
    every part holds exactly the lines its worker reported. Otherwise the parts are merged
    record by record (duplicates skipped) and the stats recomputed from the merged file.
    """
    blobs, keys = [], set()
    for report in sorted(reports, key=lambda r: r["index"]):
        path = Path(report["path"])
        data = path.read_bytes() if path.exists() else b""
        if data.count(b"\n") != report["written"] or len(report["keys"]) != report["written"]:
            break
        blobs.append(data)
        keys |= report["keys"]
    else:
        if not keys & store.completed_ids():
            store.append_lines(b"".join(blobs), keys)
            shutil.rmtree(parts_dir(config), ignore_errors=True)
            for report in reports:
                prior.merge(report["stats"])
            return prior
    merge_parts(config, store)
    return collection_stats(read_episode_models(store.path))
