"""Run episodes for a list of work items into an `EpisodeStore`; collection and evaluation both do.

The work is I/O bound, so `concurrency` episodes stay in flight on one event loop. Finished
episodes are committed in groups: everything finished since the last commit goes in one write
and one fsync, and that write runs in a worker thread, so a slow disk never stalls the loop.
Ids already in the store are skipped (a killed run resumes where it stopped).

A failure is not a result: an episode that raises (an endpoint or the retrieval server down
past its retries, our own disk full, a bug) is left out of the store, so a re-run retries it,
and its attempt is appended to `<store stem>.attempts.jsonl` beside the store. Once an id has
failed `max_attempts` times, across resumes, it is stored as a final error carrying its attempt
count (`give_up`) instead of being tried again. After `halt_after` failures in a row no new
episode starts (an outage would otherwise spend an attempt of every remaining episode); the
re-run picks them up.

An episode can take minutes of model calls, so every model call is counted (`note_model_call`)
and a heartbeat shows the count every `heartbeat_s` on the bar (or as a log line without one):
the run visibly moves.

It sits in layer 0 beside the store because it needs nothing else: what an episode is made of
comes in as `run_one`, so collection (layer 3) and evaluation (layer 4) share it without either
depending on the other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from executor_sft.files import iter_records
from executor_sft.schema import Episode, Question
from executor_sft.schema import episode_id as make_episode_id
from executor_sft.store import EpisodeStore

logger = logging.getLogger(__name__)

ATTEMPTS_SUFFIX = ".attempts.jsonl"
DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class WorkItem:
    """One episode to run: a question, its sample index and (separate collection) its driver role."""

    question: Question
    sample: int
    driver: str | None = None

    @property
    def episode_id(self) -> str:
        return make_episode_id(self.question.id, self.sample, self.driver)


def work_items(
    questions: Iterable[Question], samples: int, drivers: Sequence[str | None] = (None,)
) -> list[WorkItem]:
    """Every (question, sample, driver) in order: questions outermost, drivers innermost."""
    return [WorkItem(q, s, d) for q in questions for s in range(samples) for d in drivers]


def attempts_path(store_path: str | Path) -> Path:
    """`<store stem>.attempts.jsonl`: the failed attempts of the episodes of the store at `store_path`."""
    path = Path(store_path)
    return path.with_name(path.stem + ATTEMPTS_SUFFIX)


class AttemptLog:
    """Failed attempts per episode id, one JSON line each, so the retry bound holds across resumes.

    Several worker processes of one collection may append to one log (their ids are disjoint);
    each line is one `write` on an append-mode descriptor. Damaged lines are skipped on load.
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path is not None else None
        self.counts: Counter[str] = Counter()
        self.last_error: dict[str, str] = {}
        if self.path is not None and self.path.exists():
            for _, record in iter_records(self.path, skip_torn_tail=True, skip_bad_lines=True):
                episode_id = record.get("episode_id")
                if isinstance(episode_id, str):
                    self.counts[episode_id] += 1
                    self.last_error[episode_id] = str(record.get("error"))

    def record(self, episode_id: str, error: str) -> int:
        """Count one more failed attempt of `episode_id` (and append it); return its attempts so far."""
        self.counts[episode_id] += 1
        self.last_error[episode_id] = error
        attempt = self.counts[episode_id]
        if self.path is not None:
            line = {"episode_id": episode_id, "attempt": attempt, "error": error, "time": time.time()}
            try:
                _append_line(self.path, json.dumps(line, ensure_ascii=False) + "\n")
            except OSError as exc:  # the disk that failed the episode may be the one this is on
                logger.warning(
                    "%s: could not record attempt %d of %s: %s", self.path, attempt, episode_id, exc
                )
        return attempt


def _append_line(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        data = line.encode("utf-8")
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a torn line left by a failed write must not swallow this one
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def gave_up_episode(
    item: WorkItem, error: str, attempts: int, config: Mapping[str, Any] | None = None
) -> Episode:
    """The final record of an episode that failed `attempts` times: an error, with no rounds or runs."""
    return Episode.model_validate(
        {
            "episode_id": item.episode_id,
            "sample_index": item.sample,
            "question": item.question,
            "config": dict(config or {}),
            "stop_reason": "error",
            "error": f"gave up after {attempts} failed attempts; the last: {error}",
            "driver": item.driver,
            "attempts": attempts,
        }
    )


@dataclass
class CallMeter:
    """Model calls finished so far in one `run_episodes`, and their tokens."""

    calls: int = 0
    tokens: int = 0

    def postfix(self) -> dict[str, str]:
        return {"calls": str(self.calls), "tok": f"{self.tokens / 1000:.1f}k"}


_METER: ContextVar[CallMeter | None] = ContextVar("executor_sft_call_meter", default=None)


def note_model_call(usage: Any = None) -> None:
    """Count one finished model call (usage: a TokenUsage or its dict) towards the running
    `run_episodes`; outside one it does nothing. Agents call it after every model call."""
    meter = _METER.get()
    if meter is None:
        return
    meter.calls += 1
    get = usage.get if isinstance(usage, Mapping) else lambda key, default: getattr(usage, key, default)
    meter.tokens += int(get("prompt_tokens", 0) or 0) + int(get("completion_tokens", 0) or 0)


@dataclass
class RunReport:
    written: int = 0
    """Episodes stored by this run (final errors of `gave_up` included)."""
    skipped: int = 0
    """Items whose id was already in the store or in `skip_ids`."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(episode_id, error) for episodes that raised or could not be written; a re-run retries them."""
    gave_up: list[tuple[str, str]] = field(default_factory=list)
    """(episode_id, error) for episodes stored as final errors after `max_attempts` failed attempts."""
    not_started: list[str] = field(default_factory=list)
    """Items left untried because the run halted after `halt_after` failures in a row."""

    @property
    def unfinished(self) -> int:
        """Episodes a re-run still has to do."""
        return len(self.failed) + len(self.not_started)


async def run_episodes(
    items: Sequence[WorkItem],
    run_one: Callable[[WorkItem], Awaitable[Episode]],
    store: EpisodeStore,
    *,
    concurrency: int,
    skip_ids: Collection[str] = (),
    on_written: Callable[[Episode], None] | None = None,
    progress: Mapping[str, Any] | None = None,
    postfix: Callable[[int], Mapping[str, str]] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    give_up: Callable[[WorkItem, str, int], Episode] = gave_up_episode,
    attempts_file: str | Path | None = None,
    halt_after: int | None = None,
    expected_failures: tuple[type[BaseException], ...] = (),
    heartbeat_s: float = 10.0,
) -> RunReport:
    """Run every item not yet done with `concurrency` in flight; commit finished episodes in groups.

    Items are started in order. `on_written` sees each episode once it is durable (collection
    adds it to its running stats). `progress` holds tqdm arguments (None: no bar);
    `postfix(n_failed)` is shown on the bar after each commit. Failed attempts go to
    `attempts_file` (default `attempts_path(store.path)`); `give_up(item, last_error, attempts)`
    makes the final record of an item that failed `max_attempts` times. `halt_after` failures
    in a row (default: twice `concurrency`, at least 8) stop new items from starting. Failures
    of the `expected_failures` types (outages) are logged in one line; any other keeps the
    traceback of its first occurrence (a bug). The bar shows the model calls so far, redrawn
    every `heartbeat_s` (without a bar: an INFO line).
    """
    skip = set(skip_ids)
    todo = [item for item in items if item.episode_id not in store and item.episode_id not in skip]
    report = RunReport(skipped=len(items) - len(todo))
    bar = tqdm(**{"total": len(todo), "unit": "ep", **(progress or {})}, disable=progress is None)
    run = _GroupCommit(
        store,
        report,
        bar,
        on_written,
        postfix if progress is not None else None,
        attempts=AttemptLog(attempts_file if attempts_file is not None else attempts_path(store.path)),
        max_attempts=max_attempts,
        give_up=give_up,
        halt_after=halt_after if halt_after is not None else max(8, 2 * concurrency),
        expected_failures=expected_failures,
    )
    for item in todo:
        if run.attempts.counts[item.episode_id] >= max_attempts:  # its final record was never written
            run.finished.put_nowait(run.final_error(item, run.attempts.last_error[item.episode_id]))
        else:
            run.todo.append(item)
    meter_token = _METER.set(run.meter)  # the episodes' tasks copy this context: their calls count here
    writing = asyncio.create_task(run.writer())
    beating = asyncio.create_task(run.heartbeat(heartbeat_s, len(todo))) if todo else None
    in_flight: dict[asyncio.Future[Episode], WorkItem] = {}
    try:
        while True:
            while run.todo and len(in_flight) < concurrency and run.failures_in_a_row < run.halt_after:
                item = run.todo.popleft()
                in_flight[asyncio.ensure_future(run_one(item))] = item
            if not in_flight:
                break
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                run.settle(in_flight.pop(task), task)
    finally:
        for task in in_flight:  # only when this run is cancelled or interrupted
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        if beating is not None:
            beating.cancel()
        run.finished.put_nowait(None)
        await writing
        bar.close()
        _METER.reset(meter_token)
    report.not_started.extend(item.episode_id for item in run.todo)
    if report.not_started:
        logger.warning(
            "stopped after %d failures in a row; %d episodes not started",
            run.halt_after,
            len(report.not_started),
        )
    return report


@dataclass
class _GroupCommit:
    """What `run_episodes` settles as its episodes finish, and the one writer that commits what
    has piled up at once."""

    store: EpisodeStore
    report: RunReport
    bar: Any
    on_written: Callable[[Episode], None] | None
    postfix: Callable[[int], Mapping[str, str]] | None
    attempts: AttemptLog
    max_attempts: int
    give_up: Callable[[WorkItem, str, int], Episode]
    halt_after: int
    expected_failures: tuple[type[BaseException], ...]
    todo: deque[WorkItem] = field(default_factory=deque)
    finished: asyncio.Queue[Episode | None] = field(default_factory=asyncio.Queue)
    """Episodes waiting for the writer; None tells it to finish."""
    failures_in_a_row: int = 0
    meter: CallMeter = field(default_factory=CallMeter)

    def show(self, refresh: bool) -> None:
        """The caller's postfix (after a commit) and the model calls so far, on the bar."""
        shown = dict(self.postfix(len(self.report.failed))) if self.postfix is not None else {}
        self.bar.set_postfix({**shown, **self.meter.postfix()}, refresh=refresh)

    async def heartbeat(self, every_s: float, total: int) -> None:
        """Redraw the bar (elapsed time, calls) every `every_s`, or log a line when there is no bar."""
        start = time.monotonic()
        while True:
            await asyncio.sleep(every_s)
            if not self.bar.disable:
                self.show(refresh=True)
            else:
                logger.info(
                    "%d/%d episodes, %d model calls (%s tokens), %.0f s",
                    self.report.written + len(self.report.failed),
                    total,
                    self.meter.calls,
                    f"{self.meter.tokens:,}",
                    time.monotonic() - start,
                )

    def settle(self, item: WorkItem, task: asyncio.Future[Episode]) -> None:
        """A finished episode goes to the writer; a failed one is counted as an attempt."""
        try:
            episode = task.result()
        except Exception as exc:  # an outage or a bug: not a result; a re-run retries it
            self.failed(item, exc)
        else:
            self.failures_in_a_row = 0
            self.finished.put_nowait(episode)

    def failed(self, item: WorkItem, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"
        first = not self.report.failed and not self.report.gave_up
        _log_failure(item.episode_id, exc, traceback=first and not isinstance(exc, self.expected_failures))
        self.failures_in_a_row += 1
        if self.attempts.record(item.episode_id, error) >= self.max_attempts:
            self.finished.put_nowait(self.final_error(item, error))
        else:
            self.report.failed.append((item.episode_id, error))
            self.bar.update(1)

    def final_error(self, item: WorkItem, error: str) -> Episode:
        self.report.gave_up.append((item.episode_id, error))
        return self.give_up(item, error, self.attempts.counts[item.episode_id])

    async def writer(self) -> None:
        while True:
            batch = [await self.finished.get()]
            while not self.finished.empty():
                batch.append(self.finished.get_nowait())
            episodes = [e for e in batch if e is not None]
            if episodes:
                await self.commit(episodes)
            if None in batch:
                return

    async def commit(self, episodes: list[Episode]) -> None:
        """One write and one fsync for the group, in a worker thread (an fsync takes milliseconds)."""
        try:
            self.report.written += await asyncio.to_thread(self.store.append_many, episodes)
        except Exception as exc:  # e.g. disk full: not written, so a re-run redoes them
            logger.warning("writing %d episodes failed: %s: %s", len(episodes), type(exc).__name__, exc)
            self.report.failed.extend((e.episode_id, f"write: {type(exc).__name__}: {exc}") for e in episodes)
        else:
            for episode in episodes:
                if self.on_written is not None:
                    self.on_written(episode)
        self.bar.update(len(episodes))
        if not self.bar.disable:
            self.show(refresh=False)


def stored_count(path: str | Path) -> int:
    """Complete lines in a store file, counted without parsing (for a one-line report after Ctrl-C)."""
    path = Path(path)
    if not path.exists():
        return 0
    count = 0
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            count += chunk.count(b"\n")
    return count


def interrupted_line(store_path: str | Path, how: str = "interrupted") -> str:
    """What an interrupted run kept and how to resume it, as one line."""
    return (
        f"{how}: {stored_count(store_path)} finished episodes are kept in {store_path}; "
        "run the same command again to resume"
    )


def _log_failure(episode_id: str, exc: Exception, *, traceback: bool) -> None:
    """One line per failed episode; the first bug keeps its traceback, visible without a flood."""
    logger.warning("episode %s failed: %s: %s", episode_id, type(exc).__name__, exc, exc_info=traceback)
