"""One writer per output: an advisory `fcntl.flock` on `<file>.lock` beside the file it guards.

Two launches of the same command would otherwise both append every episode (each resumes from
what the file held when it started). The lock file holds the holder's pid, so the second
launch can say who to wait for. The kernel drops the lock when its holder dies (even by
SIGKILL), so a stale lock file never blocks anyone; a clean release removes the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from executor_sft.errors import UserError

logger = logging.getLogger(__name__)


class StoreLockedError(UserError, ValueError):
    """Another process holds the output's lock; the message names it and how to wait."""


def lock_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".lock")


class WriterLock:
    """An exclusive lock on `path` for this process (`wait`: block until the holder is done)."""

    def __init__(self, path: str | Path, *, wait: bool = False, advice: str | None = None):
        self.path = Path(path)
        self.file = lock_path(self.path)
        self.advice = advice or "run with --wait_for_lock (wait_for_lock: true) to wait for it"
        self._fd: int | None = None
        self._acquire(wait)

    def _acquire(self, wait: bool) -> None:
        while True:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                if not wait:
                    os.close(fd)
                    raise StoreLockedError(
                        f"{self.path}: another process ({holder}) is writing it; wait for it to "
                        f"finish, or {self.advice}"
                    ) from None
                logger.warning("%s: waiting for %s to finish writing it", self.path, holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, self.file):
                break
            os.close(fd)  # the holder removed the file as we waited: lock the one now at the path
        with contextlib.suppress(OSError):  # a full disk may refuse the pid; the lock holds anyway
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # removed while held, so no waiter locks a dead file
            os.unlink(self.file)
        self._close()

    def __del__(self) -> None:
        self._close()

    def _close(self) -> None:
        # forget the fd before closing it: a Ctrl-C between the two would otherwise close it
        # again in `__del__`, by then perhaps another file's descriptor
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f"pid {pid}" if pid.isdigit() else "pid unknown"


def _same_file(fd: int, path: Path) -> bool:
    try:
        at, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (at.st_dev, at.st_ino) == (held.st_dev, held.st_ino)
