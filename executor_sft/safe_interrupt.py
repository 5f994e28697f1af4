"""Ctrl-C raised only where Python can unwind it.

Python's own SIGINT handler raises `KeyboardInterrupt` at whatever bytecode runs next. Two places
turn that into a wrong outcome, both seen in the SFT recipe's first seconds:
- inside a `__del__` (regex's, while the tokenizer loads), where the exception is printed as
  "Exception ignored" and dropped, so the run went on and finished with status 0;
- inside the Python that a compiled extension runs while it initialises (pydantic-core importing
  `datetime`): the exception reaches Rust or C++ code that cannot pass it on, and the process
  panics (a Rust extension) or aborts with SIGABRT (a pybind11 one) instead of stopping.

`interrupts_at_safe_points()` installs a handler that defers the signal while either is on the
stack and raises it as soon as neither is: the handler runs again every `RETRY_S` until it lands
outside them, or at the latest when the block ends. Imports of Python modules stay interruptible
at once. A second Ctrl-C during an extension's start acts at once (the user insists; a crash is
then theirs to choose); in a `__del__` it waits too, as raising there would lose it. Recipes hold it around their imports and
their `main` (`recipe_main`). `run_async` runs a coroutine under `asyncio.run` with Python's own
handler in place of this one, so that asyncio installs its own: Ctrl-C then cancels the main task
and its cleanup runs, instead of `KeyboardInterrupt` rising inside whichever task was running.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Coroutine, Iterator
from importlib.machinery import ExtensionFileLoader
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

RETRY_S = 0.05
"""How soon a deferred Ctrl-C is tried again (a `__del__` or an extension's start is shorter)."""


def unsafe_to_raise(frame: FrameType | None) -> str | None:
    """Why raising at `frame` would go wrong (the stack holds a `__del__` or a compiled extension
    being initialised), else None."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__":
            return "__del__"
        if code.co_name in ("create_module", "exec_module") and isinstance(
            frame.f_locals.get("self"), ExtensionFileLoader
        ):
            return "extension import"
        frame = frame.f_back
    return None


class _Deferring:
    """The SIGINT handler: raise now if safe, else note the interrupt and try again shortly."""

    def __init__(self) -> None:
        self.pending = False
        self._retrying = False
        self._closed = False
        self._lock = threading.Lock()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        retry, self._retrying = self._retrying, False
        why = unsafe_to_raise(frame)
        insisted = self.pending and not retry and why != "__del__"  # raised in a `__del__`, it is lost
        if why is None or insisted:
            self.pending = False
            raise KeyboardInterrupt
        self.pending = True
        timer = threading.Timer(RETRY_S, self._retry, (signum,))
        timer.daemon = True
        timer.start()

    def _retry(self, signum: int) -> None:
        with self._lock:
            if self.pending and not self._closed:
                self._retrying = True
                # a real signal, so a main thread blocked in a system call wakes for it
                signal.pthread_kill(threading.main_thread().ident, signum)

    def close(self) -> None:
        """No retry after this (one already asked for runs here, in the main thread)."""
        with self._lock:
            self._closed = True


@contextlib.contextmanager
def interrupts_at_safe_points() -> Iterator[None]:
    """SIGINT as `KeyboardInterrupt`, raised outside `__del__` and extensions' starts (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Deferring()
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        try:
            handler.close()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler if before is None else before)
    if handler.pending:  # the block ended before a retry landed: here is safe
        handler.pending = False
        raise KeyboardInterrupt


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`; where `interrupts_at_safe_points` holds SIGINT, Python's own handler
    stands in for it meanwhile (asyncio replaces only that one with its task-cancelling handler)."""
    import asyncio  # here: every recipe imports this module before its Ctrl-C handler is in place

    on_main_thread = threading.current_thread() is threading.main_thread()
    ours = signal.getsignal(signal.SIGINT) if on_main_thread else None
    if not isinstance(ours, _Deferring):
        return asyncio.run(main)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return asyncio.run(main)
    finally:
        signal.signal(signal.SIGINT, ours)
