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
from typing import IO

from executor_sft.errors import UserError

logger = logging.getLogger(__name__)


class StoreLockedError(UserError, ValueError):
    """Another process holds the output's lock; the message names it and how to wait."""


def lock_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".lock")


class WriterLock:
    """An exclusive lock on `path` for this process (`wait`: block until the holder is done)."""

    def __init__(self, path: str | Path, *, wait: bool = False):
        self.path = Path(path)
        self.file = lock_path(self.path)
        self._fh: IO[str] | None = None
        self._acquire(wait)

    def _acquire(self, wait: bool) -> None:
        while True:
            fh = open(self.file, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fh)
                if not wait:
                    fh.close()
                    raise StoreLockedError(
                        f"{self.path}: another process ({holder}) is writing it; wait for it to "
                        "finish, or run with --wait_for_lock (wait_for_lock: true) to wait for it"
                    ) from None
                logger.warning("%s: waiting for %s to finish writing it", self.path, holder)
                fcntl.flock(fh, fcntl.LOCK_EX)
            if _same_file(fh, self.file):
                break
            fh.close()  # the holder removed the file as we waited: lock the one now at the path
        with contextlib.suppress(OSError):  # a full disk may refuse the pid; the lock holds anyway
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is None:
            return
        with contextlib.suppress(OSError):  # removed while held, so no waiter locks a dead file
            os.unlink(self.file)
        self._fh.close()
        self._fh = None

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fh: IO[str]) -> str:
    fh.seek(0)
    pid = fh.read().strip()
    return f"pid {pid}" if pid.isdigit() else "pid unknown"


def _same_file(fh: IO[str], path: Path) -> bool:
    try:
        at, held = os.stat(path), os.fstat(fh.fileno())
    except FileNotFoundError:
        return False
    return (at.st_dev, at.st_ino) == (held.st_dev, held.st_ino)
