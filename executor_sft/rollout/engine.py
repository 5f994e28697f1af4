"""The collection engine in one process: episodes for every (question, sample), counterfactual re-runs, resume.

The engine is I/O bound, so it keeps `concurrency` episodes in flight on one event loop
(`executor_sft.episode_runner`, which evaluation runs through too); each episode runs its
sub-queries and executor roles concurrently as well. Model calls are awaited, retrieval runs
in worker threads (`Retriever.asearch`) and the durable write of finished episodes runs in a
thread too, so nothing blocks the loop. A finished episode is written with
its counterfactual runs in one record, so a kill never leaves half-labelled work behind, and
a restart skips every episode id already in the file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor_sft.agents.calls import INFRASTRUCTURE_ERRORS
from executor_sft.agents.pipeline import episode_config_record, run_episode
from executor_sft.data import select_questions as select_sources
from executor_sft.episode_runner import RunReport, WorkItem, gave_up_episode, run_episodes
from executor_sft.errors import ConfigError, InputError
from executor_sft.files import write_text
from executor_sft.llm.routing import replica_counts
from executor_sft.rollout.config import CollectConfig
from executor_sft.rollout.summary import CollectionStats, collection_stats, render_summary
from executor_sft.runtime import Runtime
from executor_sft.schema import Episode, Question
from executor_sft.store import (
    EpisodeStore,
    SystemChangedError,
    read_episode_lines,
    read_episode_models,
    read_system,
    system_changes,
    system_file,
)

logger = logging.getLogger(__name__)

MERGE_CHUNK = 256
"""Records per write + fsync when merging (an fsync per record made merging slower than collecting)."""


@dataclass
class CollectResult:
    path: Path
    written: int
    skipped: int
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(episode_id, error) for episodes that raised; they are not written and a re-run retries them."""
    gave_up: list[tuple[str, str]] = field(default_factory=list)
    """(episode_id, last error) for episodes stored as final errors after `max_attempts` failures."""
    not_started: list[str] = field(default_factory=list)
    """Episodes not tried because the run halted after failures in a row; a re-run does them."""
    summary: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    timings: dict[str, Any] = field(default_factory=dict)
    """`engine: ray` only: per-node counts and the window its actors worked in."""
    stats: CollectionStats | None = None
    """What `summary` was made from (the whole file)."""


def select_questions(config: CollectConfig) -> list[Question]:
    """The question set of this config and shard (round-robin over the file order).

    `executor_sft.data.select_questions` over `config.questions` (collection's defaults: repeated
    ids dropped, `limit` for the whole source), then this shard's share.
    """
    questions = select_sources([config.questions])
    return questions[config.shard_index :: config.num_shards]


def _postfix(stats: CollectionStats, failed: int) -> dict[str, str]:
    tokens = {role: s.tokens for role, s in stats.roles.items() if s.tokens}
    shown = {role: f"{t / 1000:.0f}k" for role, t in sorted(tokens.items())}
    runs = sum(s.runs for s in stats.roles.values())
    return {"runs": str(runs), **shown, "errors": str(stats.episode_errors + failed)}


def prior_stats(store: EpisodeStore) -> CollectionStats:
    """What a previous run left in the file: the summary covers the whole file, not only this run."""
    if not len(store):
        return CollectionStats()
    return collection_stats(read_episode_models(store.path))


async def collect_in_process(
    config: CollectConfig,
    *,
    questions: Sequence[Question] | None = None,
    show_progress: bool = True,
    **given: Any,
) -> CollectResult:
    """`collect` in this process (the `in_process` engine).

    The rollouts file is opened first, so a second writer or a changed system is refused before
    any model or index loads; then the runtime is built (`CollectConfig.runtime`, with the
    `given` objects or factories: `models`, `retriever`, `judge`).
    """
    start = time.perf_counter()
    with config.open_store() as store:
        questions = (
            list(questions) if questions is not None else select_questions(config)
        )  # before models load
        stats = prior_stats(store)  # a hand-edited record is its line before any model loads
        runtime = config.runtime(**{k: v for k, v in given.items() if v is not None})
        run_one, give_up = episode_work(config, runtime)
        with runtime.cached_calls():
            report = await run_episodes(
                config.work_items(questions),
                run_one,
                store,
                concurrency=config.concurrency,
                on_written=stats.add,
                progress={"desc": "episodes", "dynamic_ncols": True} if show_progress else None,
                postfix=lambda failed: _postfix(stats, failed),
                max_attempts=config.max_attempts,
                give_up=give_up,
                attempts_file=config.attempts_file(),
                expected_failures=INFRASTRUCTURE_ERRORS,
            )
        replicas = replica_counts(runtime.models)
        return finish_run(
            config, stats, report, start=start, summary_extra={"replicas": replicas} if replicas else None
        )


def episode_work(
    config: CollectConfig, runtime: Runtime
) -> tuple[Callable[[WorkItem], Awaitable[Episode]], Callable[[WorkItem, str, int], Episode]]:
    """`run_one` (an episode with its counterfactual re-runs) and `give_up` for the episode runner;
    every engine runs these, in this process or on Ray actors."""
    models, retriever, judge = runtime.models, runtime.retriever, runtime.judge
    if missing := [role for role in config.required_roles() if role not in models]:
        raise ConfigError(
            f"models: no model for {', '.join(missing)}; give one for every role of the pipeline "
            f"({', '.join(config.required_roles())})"
        )
    # The same for every episode of this collection (of one driver): dumped once, not per episode.
    pipelines = {d: config.pipeline if d is None else config.pipeline.for_driver(d) for d in config.drivers()}
    config_records = {d: episode_config_record(p, models, retriever, judge) for d, p in pipelines.items()}

    def run_one(item: WorkItem) -> Awaitable[Episode]:
        """The item's episode, counterfactual re-runs included (its coroutine: nothing here waits)."""
        return run_episode(
            item.question,
            models,
            retriever,
            pipelines[item.driver],
            sample_index=item.sample,
            judge=judge,
            config_record=config_records[item.driver],
            separate=item.driver is not None,
            counterfactual=config.counterfactual,
        )

    def give_up(item: WorkItem, error: str, attempts: int) -> Episode:
        return gave_up_episode(item, error, attempts, config_records[item.driver])

    return run_one, give_up


def finish_run(
    config: CollectConfig,
    stats: CollectionStats,
    report: RunReport,
    *,
    start: float,
    summary_extra: dict[str, Any] | None = None,
    timings: dict[str, Any] | None = None,
) -> CollectResult:
    """Write `<rollouts>.summary.json` for one episode-runner run the driver wrote (in this process
    or on Ray) and build the result, timed from `start` (`time.perf_counter()`)."""
    summary = stats.to_dict()
    summary.update(written=report.written, skipped=report.skipped, failed=len(report.failed))
    if report.gave_up:  # only when some were: a complete run's summary is unchanged
        summary["gave_up"] = len(report.gave_up)
    if report.not_started:
        summary["not_started"] = len(report.not_started)
    summary.update(summary_extra or {})
    summary_path = config.rollouts_path.with_name(config.rollouts_path.stem + ".summary.json")
    # Atomic: a full disk keeps the last whole summary and is one OutputError line.
    write_text(summary_path, json.dumps(summary, indent=2) + "\n")
    return CollectResult(
        path=config.rollouts_path,
        written=report.written,
        skipped=report.skipped,
        failed=report.failed,
        gave_up=report.gave_up,
        not_started=report.not_started,
        summary=summary,
        elapsed_s=time.perf_counter() - start,
        timings=timings or {},
        stats=stats,
    )


def format_result(result: CollectResult) -> str:
    lines = [
        render_summary(result.summary),
        f"wrote {result.written} episodes to {result.path} in {result.elapsed_s:.1f}s "
        f"({result.skipped} already done, {len(result.failed)} failed and left for a re-run)",
    ]
    lines += [f"  failed {eid}: {err}" for eid, err in result.failed[:10]]
    if result.gave_up:
        lines.append(
            f"{len(result.gave_up)} episodes stored as errors after their last allowed attempt "
            f"(e.g. {result.gave_up[0][0]}: {result.gave_up[0][1]})"
        )
    return "\n".join(lines)


def unfinished_line(result: CollectResult) -> str | None:
    """One line for an incomplete run: how many episodes are left, why, and how to resume (None: complete)."""
    left = len(result.failed) + len(result.not_started)
    if not left:
        return None
    last = f" (the last failure: {result.failed[-1][1]})" if result.failed else ""
    return (
        f"{result.path}: {left} episodes unfinished{last}; they are not stored, so run the same "
        "command again to resume them"
    )


def merge_rollouts(
    inputs: Sequence[str | Path], output: str | Path, *, accept_system_change: bool = False
) -> tuple[int, int]:
    """Merge shard files into one; returns (written, duplicates skipped). Resumable.

    Every input must exist and none may be the output; inputs that record their system
    (`<stem>.system.json`) must record the same one, which the output then records. A failure
    part-way (a damaged input, a full disk) leaves the output as it was.
    """
    paths = [Path(p) for p in inputs]
    output = Path(output)
    for path in paths:
        if not path.is_file():
            raise InputError(f"{path}: merge input not found (or not a file); check --inputs")
        if path.resolve() == output.resolve() or (output.exists() and path.samefile(output)):
            raise InputError(f"{path}: is also the --output; merge into a new file")
    system = _merged_system(paths, accept_system_change)
    existed = output.exists()
    try:
        with EpisodeStore(output, system=system, accept_system_change=accept_system_change) as store:
            return merge_into(store, paths)
    except BaseException:
        if not existed and output.exists() and output.stat().st_size == 0:
            output.unlink()
            system_file(output).unlink(missing_ok=True)
        raise


def _merged_system(paths: Sequence[Path], accept: bool) -> dict[str, Any] | None:
    """The one system the inputs record (None when none records one)."""
    found = [(path, fingerprint) for path in paths if (fingerprint := read_system(path)) is not None]
    if not found:
        return None
    first, fingerprint = found[0]
    for path, other in found[1:]:
        changes = system_changes(fingerprint, other)
        if changes and not accept:
            raise SystemChangedError(
                f"{path}: holds episodes of a different system than {first} (changed: "
                f"{'; '.join(changes[:4])}); merge each system into its own file, or pass "
                "--accept_system_change to merge them anyway"
            )
    return {k: v for k, v in fingerprint.items() if k != "schema"}


def merge_into(store: EpisodeStore, inputs: Sequence[Path]) -> tuple[int, int]:
    """Append every input's new records to `store`, all or nothing; returns (written, duplicates)."""
    written = seen = 0
    known = store.completed_ids()
    with store.all_or_nothing():
        for path in inputs:
            lines: list[bytes] = []
            keys: set[str] = set()
            for record, line in read_episode_lines(path):
                seen += 1
                if (key := store.key(record)) in known:
                    continue
                known.add(key)
                keys.add(key)
                lines.append(line)
                if len(lines) == MERGE_CHUNK:
                    store.append_lines(b"".join(lines), keys)
                    written, lines, keys = written + len(lines), [], set()
            store.append_lines(b"".join(lines), keys)
            written += len(lines)
    return written, seen - written
