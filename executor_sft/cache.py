"""The project's on-disk cache: converted offline models, sample-data indexes, test indexes.

`$EXECUTOR_SFT_CACHE` (default `~/.cache/executor_sft`) holds only derived files; each entry's
name carries a key of everything that changes its contents, so a stale entry is never reused.
An entry is built once, under a lock (`cached_entry`); a complete entry is read without one, so
a read-only cache that already holds it works. A wait for another builder says who it is and
gives up after `EXECUTOR_SFT_CACHE_LOCK_TIMEOUT_S` (a stopped builder would hold it forever).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from executor_sft.errors import UserError
from executor_sft.versions import package_version

logger = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 600.0
"""How long a loader waits for another process building the same entry (the env var overrides)."""
WAIT_NOTE_EVERY_S = 30.0
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR}
"""A cache that cannot be written: the user's disk or setting, not a bug."""


class CacheError(UserError, OSError):
    """The cache cannot be used as set (a file, unwritable, full, or an entry's builder stuck)."""


def cache_dir() -> Path:
    root = Path(os.environ.get("EXECUTOR_SFT_CACHE", Path.home() / ".cache" / "executor_sft"))
    if root.exists() and not root.is_dir():
        raise CacheError(
            f"{root}: the cache (EXECUTOR_SFT_CACHE) is a file; point EXECUTOR_SFT_CACHE at a folder"
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(
            f"{root}: cannot make the cache folder ({exc.strerror}); point EXECUTOR_SFT_CACHE at a writable folder"
        ) from None
    return root


def cache_key(*parts: object, packages: tuple[str, ...] = ()) -> str:
    """A short hash of `parts` and the installed versions of `packages`: a cache path component."""
    payload = json.dumps(
        [list(parts), {p: package_version(p) for p in packages}], sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def cached_entry(entry: Path, complete: Path, build: Callable[[], object]) -> Path:
    """`entry`, built by `build()` unless `complete` (a file the finished entry holds) exists.

    The build runs under the entry's lock, once across processes; a cache that cannot take the
    build (read-only, full, a file) is one line naming the entry and what to do.
    """
    if complete.exists():
        return entry
    with cache_lock(entry):
        if not complete.exists():
            try:
                build()
            except Exception as exc:
                code = _write_errno(exc)
                if code not in WRITE_ERRNOS:
                    raise
                raise CacheError(
                    f"{entry}: cannot build this cache entry ({os.strerror(code)}); free space there, or point "
                    "EXECUTOR_SFT_CACHE at a writable folder with room"
                ) from None
    return entry


def _write_errno(exc: BaseException) -> int | None:
    """The OS error number of a failed write: an `OSError`'s, or one a Rust library (safetensors,
    tokenizers) put in its message as "(os error N)"."""
    if isinstance(exc, OSError):
        return exc.errno
    found = re.search(r"\(os error (\d+)\)", str(exc))
    return int(found[1]) if found else None


@contextlib.contextmanager
def cache_lock(entry: Path, timeout_s: float | None = None) -> Iterator[None]:
    """An inter-process lock for building one cache entry: parallel test workers or two recipes
    started together build it once, and the second waits for the first instead of racing it.

    The lock file (`<entry>.lock`) holds its holder's pid and host, which the waiter names (an
    `fcntl.flock`, as `executor_sft.store_lock`: filelock truncates the file at every try, so it
    cannot say who holds it). The kernel drops the lock when its holder dies, even by SIGKILL.
    """
    if timeout_s is None:
        timeout_s = float(os.environ.get("EXECUTOR_SFT_CACHE_LOCK_TIMEOUT_S", LOCK_TIMEOUT_S))
    path = Path(str(entry) + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # the entry's group folder (a fresh cache has none)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CacheError(
            f"{entry}: not in the cache yet, and the cache cannot be written to build it ({exc.strerror}); "
            "point EXECUTOR_SFT_CACHE at a writable folder"
        ) from None
    try:
        _acquire(fd, path, timeout_s)
        with contextlib.suppress(OSError):  # a full disk may refuse the note; the lock holds anyway
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing drops the lock; the file stays (removing it would race a waiter)


def _acquire(fd: int, path: Path, timeout_s: float) -> None:
    start = time.monotonic()
    noted = -WAIT_NOTE_EVERY_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
        if waited >= timeout_s:
            raise CacheError(
                f"{path}: {holder} has held this cache lock for over {timeout_s:g} s (building the entry beside "
                "it); if that process is stopped or hung, end it and run again, or set "
                "EXECUTOR_SFT_CACHE_LOCK_TIMEOUT_S to wait longer"
            )
        if waited - noted >= WAIT_NOTE_EVERY_S:
            noted = waited
            logger.warning(
                "%s: waiting for %s, which is building this cache entry (%.0f s so far; giving up after %g s)",
                path,
                holder,
                waited,
                timeout_s,
            )
        time.sleep(min(0.2, max(timeout_s - waited, 0.01)))
