"""A process-wide cap on executor runs in flight: wide rounds (P up to 10) times many episodes.

Each backbone round already runs its sub-queries concurrently; with P = 10 and `concurrency`
episodes in flight that is 10 x concurrency executor conversations at once. A model backend's
own `max_concurrency` caps requests per model object; this caps executor runs across every
episode on one event loop, whichever models they use (`PipelineConfig.max_concurrent_executors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def executor_slot(limit: int | None) -> AsyncIterator[None]:
    """Hold one of `limit` slots shared by every caller with the same limit on this loop (None: no cap)."""
    if limit is None:
        yield
        return
    slots = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    semaphore = slots.setdefault(limit, asyncio.Semaphore(limit))
    async with semaphore:
        yield
