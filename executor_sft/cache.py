"""The project's on-disk cache: converted offline models, sample-data indexes, test indexes.

`$EXECUTOR_SFT_CACHE` (default `~/.cache/executor_sft`) holds only derived files; each entry's
name carries a key of everything that changes its contents, so a stale entry is never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from filelock import FileLock

from executor_sft.versions import package_version


def cache_dir() -> Path:
    root = Path(os.environ.get("EXECUTOR_SFT_CACHE", Path.home() / ".cache" / "executor_sft"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_key(*parts: object, packages: tuple[str, ...] = ()) -> str:
    """A short hash of `parts` and the installed versions of `packages`: a cache path component."""
    payload = json.dumps(
        [list(parts), {p: package_version(p) for p in packages}], sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def cache_lock(entry: Path) -> FileLock:
    """An inter-process lock for building one cache entry: parallel test workers or two recipes
    started together build it once, and the second waits for the first instead of racing it."""
    return FileLock(str(entry) + ".lock")
