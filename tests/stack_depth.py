"""Frames of our own code from a recipe's `main` to a model's HTTP request, across asyncio tasks.

A coroutine's stack starts at its task, so each task created while the count is on remembers
the logical stack it was created from (its parent's, then the frames at its creation); at every
request the httpx transport sees, that chain plus the current stack is cut to the part between
`main` (inclusive) and the first frame of the HTTP libraries, and the frames of files under
`roots` are counted. Library, asyncio and stdlib frames are not counted, nor `run_async`, our
`asyncio.run` (it only chooses the SIGINT handler the loop runs under).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

HTTP_LIBRARIES = ("/openai/", "/httpx/", "/httpx2/", "/httpcore/")
TRANSPORTS = ("httpx", "httpx2")
"""Where the OpenAI client may send from (its releases moved from httpx to httpx2)."""


@dataclass
class Depths:
    """Per request: the counted frames (outermost first) as `file:function`."""

    chains: list[list[str]] = field(default_factory=list)

    @property
    def deepest(self) -> list[str]:
        return max(self.chains, key=len) if self.chains else []


def _frames(frame: FrameType | None) -> list[FrameType]:
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out[::-1]


@contextlib.contextmanager
def count_frames(entry: str, roots: list[Path]) -> Iterator[Depths]:
    """Count, for every request sent while inside, the frames under `roots` from the `entry`
    function (`main`) to the first frame of the HTTP libraries."""
    import importlib

    transports = []
    for name in TRANSPORTS:
        with contextlib.suppress(ImportError):
            transports.append(importlib.import_module(name).AsyncHTTPTransport)
    depths = Depths()
    origins: dict[asyncio.Task, list[FrameType]] = {}
    roots_s = [str(r.resolve()) for r in roots]

    def logical(frame: FrameType | None) -> list[FrameType]:
        task = None
        with contextlib.suppress(RuntimeError):
            task = asyncio.current_task()
        frames = _frames(frame)
        if task is None:
            return frames
        # The loop's own frames (and the sync stack that started it) precede the task's coroutine.
        root = getattr(task.get_coro(), "cr_frame", None)
        mine = frames[frames.index(root) :] if root in frames else frames
        return origins.get(task, []) + mine

    def factory(loop: asyncio.AbstractEventLoop, coro, **kwargs):
        task = asyncio.Task(coro, loop=loop, **kwargs)
        origins[task] = logical(sys._getframe(1))
        return task

    class Policy(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self):
            loop = super().new_event_loop()
            loop.set_task_factory(factory)
            return loop

    def recording(send):
        async def recorded(self, request):
            record(sys._getframe(0))
            return await send(self, request)

        return recorded

    def record(frame: FrameType) -> None:
        chain = logical(frame)
        starts = [i for i, f in enumerate(chain) if f.f_code.co_name == entry and _ours(f, roots_s)]
        if starts:
            chain = chain[starts[0] :]
            ends = [
                i for i, f in enumerate(chain) if any(lib in f.f_code.co_filename for lib in HTTP_LIBRARIES)
            ]
            chain = chain[: ends[0]] if ends else chain
            depths.chains.append(
                [f"{Path(f.f_code.co_filename).name}:{f.f_code.co_name}" for f in chain if _ours(f, roots_s)]
            )

    old_policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(Policy())
    sends = [(t, t.handle_async_request) for t in transports]
    for transport, send in sends:
        transport.handle_async_request = recording(send)
    try:
        yield depths
    finally:
        for transport, send in sends:
            transport.handle_async_request = send
        asyncio.set_event_loop_policy(old_policy)


NOT_COUNTED = ("safe_interrupt.py",)
"""Our files that stand where the standard library stood (`run_async` for `asyncio.run`)."""


def _ours(frame: FrameType, roots: list[str]) -> bool:
    name = str(Path(frame.f_code.co_filename).resolve())
    return Path(name).name not in NOT_COUNTED and any(name.startswith(root + "/") for root in roots)
