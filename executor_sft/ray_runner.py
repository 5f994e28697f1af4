"""Run episodes on Ray actors across machines; the calling process stays the only writer of the store.

Work items are cut into tasks and handed to actors, one task at a time per actor. Each actor
builds its models and retriever once, on its own node (`ActorWork`, from a picklable factory:
nothing is read from a shared filesystem), and runs the ordinary async runner
(`episode_runner.run_episodes`) with its share of the concurrency. Finished episodes stream
back as their JSONL lines, serialised on the actor exactly as the store would, and the driver
appends them to its `EpisodeStore` (lock, group commit, resume by id as in one process).

A task whose actor dies (its worker, or its whole node) is cut to the items not yet received
and put back in the queue, so the surviving actors finish it; the driver skips an id it already
stored, so nothing is written twice. Failed attempts come back with the task's last message
and go to the driver's attempts log, so `max_attempts` holds across machines; attempts of a
task whose actor died before reporting are not counted. With every actor dead the remaining
items are reported as not started and a re-run picks them up.

An actor can also report on itself (`ActorWork.snapshot`, collection: the requests each model
replica served through its own endpoint pools): it is taken at the end of each task and sent
with the task's `TaskEnd`, and the driver keeps each actor's latest. An actor lost mid-task
contributes the snapshot of its last finished task (none if it finished none), so counts of
work it did in the task it died in are missing from the report.

`ray` is imported only here, inside the functions: the package works without it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from tqdm.auto import tqdm

from executor_sft.episode_runner import (
    DEFAULT_MAX_ATTEMPTS,
    AttemptLog,
    RunReport,
    WorkItem,
    attempts_path,
    gave_up_episode,
    run_episodes,
)
from executor_sft.errors import UserError
from executor_sft.schema import Episode
from executor_sft.store import EpisodeStore, episode_line

logger = logging.getLogger(__name__)

POLL_S = 0.05
"""How often an idle actor's driver loop looks for a re-queued task."""
REACH_TIMEOUT_S = 5.0
"""How long `connect` waits for a TCP answer at an explicit `ray.address`."""


class TaskStalledError(Exception):
    """A task whose actor sent nothing within the heartbeat deadline: treated as a lost actor."""


class RayNotInstalledError(UserError, ImportError):
    """`engine: ray` without the `ray` extra installed."""


class RayConfig(BaseModel):
    """Where the Ray cluster is and how the work is spread over it (docs/scale.md)."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    """`ray.init(address=...)`: "auto" (a cluster started with `ray start` on this machine), a
    `ray://host:10001` client address, or None (RAY_ADDRESS, else a local one-machine cluster)."""
    actors: int | None = Field(default=None, ge=1)
    """Actors that run episodes (default: one per alive node); the concurrency is split among them."""
    cpus_per_actor: float = Field(default=1.0, gt=0)
    task_size: int | None = Field(default=None, ge=1)
    """Episodes per task (default: an even share per actor, so each actor gets one task)."""
    heartbeat_s: float = Field(default=60.0, gt=0)
    """A running task sends a heartbeat every `heartbeat_s / 4`; one that sends nothing for
    `heartbeat_s` (a stopped or hung actor) is lost: its actor is killed and the task re-queued."""
    start_timeout_s: float = Field(default=120.0, gt=0)
    """How long a replacement for a lost actor may take to be placed and start; past it the run
    goes on with the actors it has."""


@dataclass
class ActorWork:
    """What an actor runs, built on its node by the caller's factory: models and retriever load there."""

    run_one: Callable[[WorkItem], Awaitable[Episode]]
    give_up: Callable[[WorkItem, str, int], Episode] = gave_up_episode
    expected_failures: tuple[type[BaseException], ...] = ()
    digest: Callable[[Episode], Any] | None = None
    """Computed on the actor for each finished episode and handed to the driver's `on_written`
    (collection sends its per-episode stats), so the driver never parses an episode."""
    snapshot: Callable[[], Any] | None = None
    """Called on the actor at the end of each task; its (picklable) result travels with the task's
    `TaskEnd` and the driver keeps each actor's latest (`RayRunReport.snapshots`)."""


WorkFactory = Callable[[], ActorWork]
"""Builds an actor's `ActorWork` (must be picklable: it travels to every actor)."""


@dataclass(frozen=True)
class Finished:
    """One finished episode as it travels from an actor: its id, its store line and its digest."""

    episode_id: str
    line: bytes
    digest: Any = None


@dataclass
class TaskEnd:
    """The last message of a task: the attempts that failed in it and the items it never started."""

    failed: list[tuple[str, str]] = field(default_factory=list)
    gave_up: list[tuple[str, str]] = field(default_factory=list)
    not_started: list[str] = field(default_factory=list)
    snapshot: Any = None
    """`ActorWork.snapshot()` taken as the task ended (None without one)."""


class _StreamSink:
    """Stands in for the actor's store: finished episodes go to the driver instead of a file."""

    def __init__(self, path: Path, digest: Callable[[Episode], Any] | None):
        self.path = path
        self.digest = digest
        self.loop = asyncio.get_running_loop()
        self.batches: asyncio.Queue[list[Finished] | None] = asyncio.Queue()

    def __contains__(self, key: str) -> bool:
        return False  # the driver sends only items it has not stored

    def append_many(self, episodes: list[Episode]) -> int:  # called in a worker thread
        batch = [
            Finished(e.episode_id, episode_line(e), self.digest(e) if self.digest else None) for e in episodes
        ]
        self.loop.call_soon_threadsafe(self.batches.put_nowait, batch)
        return len(batch)


class EpisodeActor:
    """A Ray actor (wrapped by `ray.remote` at run time) that runs tasks of work items."""

    def __init__(
        self,
        factory: WorkFactory,
        concurrency: int,
        max_attempts: int,
        heartbeat_every_s: float,
        env: Mapping[str, str] | None = None,
    ):
        os.environ.update(env or {})  # before the work is built: its models read their API keys
        self.work = factory()
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.heartbeat_every_s = heartbeat_every_s
        self.scratch = Path(tempfile.mkdtemp(prefix="executor_sft_actor_"))

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    async def run(self, items: list[WorkItem], prior: dict[str, list[Any]]):
        """Yield batches of `Finished` as they commit (an empty one as a heartbeat when none has for
        `heartbeat_every_s`), then one `TaskEnd`.

        `prior` holds the driver's attempts so far per id, `[count, last error]`: the bound is
        applied here exactly as in one process."""
        log = self.scratch / f"attempts-{time.monotonic_ns()}.jsonl"
        log.write_text(
            "".join(
                f'{{"episode_id": {_json(eid)}, "error": {_json(error)}}}\n'
                for eid, (count, error) in prior.items()
                for _ in range(count)
            )
        )
        sink = _StreamSink(self.scratch / "stream.jsonl", self.work.digest)
        runner = asyncio.create_task(
            run_episodes(
                items,
                self.work.run_one,
                sink,  # type: ignore[arg-type]
                concurrency=self.concurrency,
                max_attempts=self.max_attempts,
                give_up=self.work.give_up,
                attempts_file=log,
                expected_failures=self.work.expected_failures,
            )
        )
        runner.add_done_callback(lambda _: sink.batches.put_nowait(None))
        while True:
            try:
                batch = await asyncio.wait_for(sink.batches.get(), self.heartbeat_every_s)
            except TimeoutError:
                yield []  # a heartbeat: this actor is alive, its episodes are still running
                continue
            if batch is None:
                break
            yield batch
        while not sink.batches.empty():  # batches queued by the writer thread after the end marker
            if (batch := sink.batches.get_nowait()) is not None:
                yield batch
        report = await runner
        log.unlink(missing_ok=True)
        yield TaskEnd(
            failed=report.failed,
            gave_up=report.gave_up,
            not_started=report.not_started,
            snapshot=self.work.snapshot() if self.work.snapshot is not None else None,
        )


def _json(value: str) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayNotInstalledError(
            "engine ray needs the ray extra: pip install -e '.[ray]' (or pick engine in_process)"
        ) from None
    return ray


class RayUnreachableError(UserError):
    """`ray.address` names a host and port where nothing answers."""


def check_reachable(address: str | None, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """One line instead of Ray's minutes of GCS warnings when nothing listens at `address`."""
    if address in (None, "", "auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnreachableError(f"ray.address {address!r}: expected host:port, ray://host:port or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnreachableError(
            f"ray.address {address}: nothing answers there ({exc.strerror or exc}); start the cluster "
            "(ray start --head, docs/scale.md) or correct ray.address"
        ) from None


def connect(config: RayConfig) -> Any:
    """The `ray` module, connected to the configured cluster (once per process)."""
    ray = import_ray()
    if not ray.is_initialized():
        check_reachable(config.address)
        ray.init(address=config.address, log_to_driver=False, logging_level=logging.WARNING)
    return ray


def actors_that_fit(ray: Any, wanted: int, cpus_per_actor: float) -> int:
    """`wanted`, or as many actors as the cluster's CPUs hold (with a warning naming the shortfall);
    none fitting is one line."""
    cpus = float(ray.cluster_resources().get("CPU", 0))
    fit = int(cpus // cpus_per_actor)
    if fit < 1:
        raise UserError(
            f"ray: the cluster has {cpus:g} CPUs, fewer than one actor's ray.cpus_per_actor={cpus_per_actor:g}; "
            "lower ray.cpus_per_actor or add nodes"
        )
    if fit < wanted:
        logger.warning(
            "ray: %d actors asked for, the cluster's %g CPUs hold %d at ray.cpus_per_actor=%g: starting %d",
            wanted,
            cpus,
            fit,
            cpus_per_actor,
            fit,
        )
    return min(wanted, fit)


def _tasks(items: Sequence[WorkItem], n_actors: int, task_size: int | None) -> list[list[WorkItem]]:
    """Round-robin shares, one per actor, or chunks of `task_size` in order."""
    if task_size is None:
        return [list(items[i::n_actors]) for i in range(n_actors) if items[i::n_actors]]
    return [list(items[i : i + task_size]) for i in range(0, len(items), task_size)]


@dataclass
class RayRunReport(RunReport):
    """A `RunReport` plus how the cluster did."""

    actors: int = 0
    lost_actors: int = 0
    requeued: int = 0
    """Items put back in the queue after their actor died."""
    per_node: dict[str, int] = field(default_factory=dict)
    """Episodes written per node id."""
    snapshots: dict[int, Any] = field(default_factory=dict)
    """Actor index -> the latest `ActorWork.snapshot` it sent (actors that sent none are absent)."""
    started_at: float = 0.0
    finished_at: float = 0.0
    """`time.perf_counter()` when every actor was ready and when the last task ended."""


async def run_episodes_ray(
    items: Sequence[WorkItem],
    factory: WorkFactory,
    store: EpisodeStore,
    ray_config: RayConfig,
    *,
    concurrency: int,
    skip_ids: Collection[str] = (),
    on_written: Callable[[Any], None] | None = None,
    progress: Mapping[str, Any] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    attempts_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> RayRunReport:
    """`run_episodes` over Ray actors: same skips, retry bound and store; `on_written` gets digests.

    `env` (the driver's API keys) is set in every actor's environment. It travels as an argument
    of the actor's constructor, in memory: not in a `runtime_env`, whose `env_vars` Ray records
    (its runtime-env agent logs each request, its state API shows each actor's), so a key exported
    only in the driver's shell reaches the actors and no file."""
    skip = set(skip_ids)
    todo = [item for item in items if item.episode_id not in store and item.episode_id not in skip]
    report = RayRunReport(skipped=len(items) - len(todo))
    # Items at their last allowed attempt go to the actors too: they store the final error there.
    attempts = AttemptLog(attempts_file if attempts_file is not None else attempts_path(store.path))
    if not todo:
        return report
    ray = connect(ray_config)
    n_actors = ray_config.actors or max(1, sum(1 for n in ray.nodes() if n.get("Alive")))
    n_actors = actors_that_fit(ray, min(n_actors, len(todo)), ray_config.cpus_per_actor)
    share = max(1, -(-concurrency // n_actors))
    remote = ray.remote(EpisodeActor).options(
        num_cpus=ray_config.cpus_per_actor, max_restarts=0, scheduling_strategy="SPREAD"
    )

    def spawn() -> Any:
        return remote.remote(factory, share, max_attempts, ray_config.heartbeat_s / 4, dict(env or {}))

    actors = [spawn() for _ in range(n_actors)]
    driver = _Driver(
        ray,
        store,
        report,
        attempts,
        on_written,
        list(_tasks(todo, n_actors, ray_config.task_size)),
        spawn=spawn,
        heartbeat_s=ray_config.heartbeat_s,
        start_timeout_s=ray_config.start_timeout_s,
        replacements_left=n_actors,
    )
    bar = tqdm(**{"total": len(todo), "unit": "ep", **(progress or {})}, disable=progress is None)
    driver.bar = bar
    report.actors = n_actors
    try:
        # Start-up (loading models and index) ends before any task is handed out, so every actor
        # gets its share and the timed window below is collection alone.
        nodes = await asyncio.gather(*(driver.ready(actor) for actor in actors))
        if not any(nodes):  # e.g. the index path missing on the nodes: say why, not "0 written"
            raise RuntimeError(f"no Ray actor could start: {driver.errors[0]}")
        report.started_at = time.perf_counter()
        await asyncio.gather(
            *(
                driver.serve(slot, actor, node)
                for slot, (actor, node) in enumerate(zip(actors, nodes, strict=True))
            )
        )
        report.finished_at = time.perf_counter()
    finally:
        bar.close()
        for actor in actors + driver.replacements:
            ray.kill(actor, no_restart=True)
    for task in driver.queue:
        report.not_started += [item.episode_id for item in task]
    if report.not_started:
        logger.warning("every Ray actor died; %d episodes not started", len(report.not_started))
    return report


@dataclass
class _Driver:
    """Hands tasks to actors, stores what streams back, re-queues what a dead actor left."""

    ray: Any
    store: EpisodeStore
    report: RayRunReport
    attempts: AttemptLog
    on_written: Callable[[Any], None] | None
    queue: list[list[WorkItem]]
    spawn: Callable[[], Any] | None = None
    """Starts a replacement actor for a lost one (None: none are started)."""
    heartbeat_s: float = 60.0
    start_timeout_s: float = 120.0
    replacements_left: int = 0
    replacements: list[Any] = field(default_factory=list)
    in_flight: int = 0
    bar: Any = None
    _received: set[str] = field(default_factory=set)
    """Ids stored from the stream (the store holds them too; this also covers a write in flight)."""
    errors: list[str] = field(default_factory=list)

    async def ready(self, actor: Any) -> str | None:
        """The actor's node once it has built its models and retriever (None: it died doing so)."""
        try:
            return await actor.node.remote()
        except self.ray.exceptions.RayError as exc:
            self._lost(exc)
            return None

    async def serve(self, slot: int, actor: Any, node: str | None) -> None:
        """Hand tasks to `actor` until none are left; a lost actor's slot gets a replacement."""
        while node is not None:
            if not self.queue:
                if not self.in_flight:
                    return
                await asyncio.sleep(POLL_S)  # a running task may yet be re-queued
                continue
            task = self.queue.pop(0)
            self.in_flight += 1
            try:
                await self._run_task(slot, actor, node, task)
            except (self.ray.exceptions.RayError, TaskStalledError) as exc:
                left = [item for item in task if item.episode_id not in self.store]
                left = [item for item in left if item.episode_id not in self._received]
                self.report.requeued += len(left)
                if left:
                    self.queue.append(left)
                self._lost(exc)
                self.ray.kill(actor, no_restart=True)
                actor, node = await self._replacement()
            finally:
                self.in_flight -= 1

    async def _replacement(self) -> tuple[Any, str | None]:
        """A new actor once it is ready, or (None, None): none left to start, it could not be placed
        within `start_timeout_s`, or no work is left for it (the other actors finished it)."""
        if self.spawn is None or self.replacements_left < 1 or not self.queue:
            return None, None
        self.replacements_left -= 1
        actor = self.spawn()
        self.replacements.append(actor)
        ready = asyncio.ensure_future(self.ready(actor))
        deadline = time.monotonic() + self.start_timeout_s
        while not ready.done():
            if time.monotonic() > deadline or (not self.queue and self.in_flight <= 1):
                ready.cancel()
                self.ray.kill(actor, no_restart=True)
                if self.queue:
                    logger.warning(
                        "ray: a replacement actor was not placed within %.0f s; going on with the others",
                        self.start_timeout_s,
                    )
                return None, None
            await asyncio.wait({ready}, timeout=POLL_S)
        node = ready.result()
        if node is not None:
            logger.warning("ray: a replacement actor started on node %s", node[:12])
        return actor, node

    def _lost(self, exc: BaseException) -> None:
        self.report.lost_actors += 1
        lines = [line for line in str(exc).splitlines() if line.strip()]
        error = f"{type(exc).__name__}: {lines[-1] if lines else ''}"  # the cause is the last line
        self.errors.append(error)
        logger.warning("a Ray actor was lost (%s); its unfinished episodes go to the others", error)

    async def _run_task(self, slot: int, actor: Any, node: str, task: list[WorkItem]) -> int:
        prior = {
            item.episode_id: [
                self.attempts.counts[item.episode_id],
                self.attempts.last_error[item.episode_id],
            ]
            for item in task
            if self.attempts.counts[item.episode_id]
        }
        stream = actor.run.options(num_returns="streaming").remote(task, prior)
        received = 0
        while True:
            try:
                ref = await asyncio.wait_for(stream.__anext__(), self.heartbeat_s)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise TaskStalledError(
                    f"no message (episode or heartbeat) from the actor for {self.heartbeat_s:g} s"
                ) from None
            message = await ref
            if isinstance(message, TaskEnd):
                self._end(slot, message)
                continue
            received += await self._store(message, node)
        return received

    async def _store(self, batch: list[Finished], node: str) -> int:
        new = [f for f in batch if f.episode_id not in self.store and f.episode_id not in self._received]
        unique = {f.episode_id: f for f in new}
        if unique:
            blob = b"".join(f.line for f in unique.values())
            await asyncio.to_thread(self.store.append_lines, blob, set(unique))
            self._received |= set(unique)
            self.report.written += len(unique)
            self.report.per_node[node] = self.report.per_node.get(node, 0) + len(unique)
            for f in unique.values():
                if self.on_written is not None:
                    self.on_written(f.digest)
        self.bar.update(len(unique))
        self.bar.set_postfix(
            {"nodes": str(len(self.report.per_node)), "lost": str(self.report.lost_actors)}, refresh=False
        )
        return len(unique)

    def _end(self, slot: int, end: TaskEnd) -> None:
        if end.snapshot is not None:
            self.report.snapshots[slot] = end.snapshot
        for episode_id, error in end.failed:
            self.attempts.record(episode_id, error)
            self.report.failed.append((episode_id, error))
        self.report.gave_up += end.gave_up
        self.report.not_started += end.not_started
        self.bar.update(len(end.failed))
