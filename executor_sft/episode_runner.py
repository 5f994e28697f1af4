"""Run episodes for a list of work items into an `EpisodeStore`; collection and evaluation both do.

The work is I/O bound, so `concurrency` episodes stay in flight on one event loop. Finished
episodes are committed in groups: everything finished since the last commit goes in one write
and one fsync, and that write runs in a worker thread, so a slow disk never stalls the loop.
Ids already in the store are skipped (a killed run resumes where it stopped); an episode that
raises is logged and left out of the store, so a re-run retries it. An episode can take minutes
of model calls, so every model call is counted (`note_model_call`) and a heartbeat shows the
count every `heartbeat_s` on the bar (or as a log line without one): the run visibly moves.

It sits in layer 0 beside the store because it needs nothing else: what an episode is made of
comes in as `run_one`, so collection (layer 3) and evaluation (layer 4) share it without either
depending on the other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from executor_sft.schema import Episode, Question
from executor_sft.schema import episode_id as make_episode_id
from executor_sft.store import EpisodeStore

logger = logging.getLogger(__name__)


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
    skipped: int = 0
    """Items whose id was already in the store or in `skip_ids`."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(episode_id, error) for episodes that raised or could not be written; a re-run retries them."""


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
    heartbeat_s: float = 10.0,
) -> RunReport:
    """Run every item not yet done with `concurrency` in flight; commit finished episodes in groups.

    Items are started in order. `on_written` sees each episode once it is durable (collection
    adds it to its running stats). `progress` holds tqdm arguments (None: no bar);
    `postfix(n_failed)` is shown on the bar after each commit, with the model calls so far.
    Every `heartbeat_s` the bar is redrawn with the calls made (without a bar: an INFO line).
    """
    skip = set(skip_ids)
    todo = [item for item in items if item.episode_id not in store and item.episode_id not in skip]
    report = RunReport(skipped=len(items) - len(todo))
    bar = tqdm(**{"total": len(todo), "unit": "ep", **(progress or {})}, disable=progress is None)
    run = _GroupCommit(run_one, store, report, bar, on_written, postfix if progress is not None else None)
    for item in todo:
        run.todo.put_nowait(item)
    meter_token = _METER.set(run.meter)  # the workers' tasks copy this context: their calls count here
    writing = asyncio.create_task(run.writer())
    beating = asyncio.create_task(run.heartbeat(heartbeat_s, len(todo))) if todo else None
    try:
        await asyncio.gather(*(run.worker() for _ in range(min(concurrency, max(1, len(todo))))))
    finally:
        if beating is not None:
            beating.cancel()
        run.finished.put_nowait(None)
        await writing
        bar.close()
        _METER.reset(meter_token)
    return report


@dataclass
class _GroupCommit:
    """Workers run episodes and hand them to one writer, which commits what has piled up at once."""

    run_one: Callable[[WorkItem], Awaitable[Episode]]
    store: EpisodeStore
    report: RunReport
    bar: Any
    on_written: Callable[[Episode], None] | None
    postfix: Callable[[int], Mapping[str, str]] | None
    todo: asyncio.Queue[WorkItem] = field(default_factory=asyncio.Queue)
    finished: asyncio.Queue[Episode | None] = field(default_factory=asyncio.Queue)
    """Episodes waiting for the writer; None tells it to finish."""
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

    async def worker(self) -> None:
        while not self.todo.empty():
            item = self.todo.get_nowait()
            try:
                episode = await self.run_one(item)
            except Exception as exc:  # a bug or an outage: keep going, leave it for the re-run
                _log_failure(item.episode_id, exc, first=not self.report.failed)
                self.report.failed.append((item.episode_id, f"{type(exc).__name__}: {exc}"))
                self.bar.update(1)
            else:
                self.finished.put_nowait(episode)

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


def _log_failure(episode_id: str, exc: Exception, *, first: bool) -> None:
    """One line per failed episode; the first keeps its traceback, so a bug is visible without a flood."""
    logger.warning("episode %s failed: %s: %s", episode_id, type(exc).__name__, exc, exc_info=first)
