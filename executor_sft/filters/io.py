"""JSONL input with line locations, and atomic output (a crash never leaves a half file)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

logger = logging.getLogger(__name__)


class MalformedLineError(ValueError):
    """A JSONL line that is not a JSON object; the message names the file and line."""


class Located(NamedTuple):
    """A record and where it came from (`file:line`), for error messages."""

    where: str
    record: dict[str, Any]


def iter_jsonl(path: str | Path) -> Iterator[Located]:
    """Yield each JSON object of a JSONL file lazily with its `file:line`.

    Blank lines are skipped. A line that is not a JSON object raises ValueError naming the
    file and line (`MalformedLineError`), except an unfinished last line (no trailing newline: a writer was killed),
    which is skipped with a warning, as the episode store does.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if not line.endswith("\n"):
                    logger.warning("%s:%d: skipping an unfinished last line", path, i)
                    return
                raise MalformedLineError(
                    f"{path}:{i}: invalid JSON ({exc.msg} at column {exc.colno})"
                ) from None
            if not isinstance(record, dict):
                raise MalformedLineError(f"{path}:{i}: expected a JSON object, got {type(record).__name__}")
            yield Located(f"{path}:{i}", record)


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[str]]:
    """Write to a temporary file next to `path`, then fsync and rename it over `path`.

    If the block raises, the temporary file is removed and `path` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows atomically, one compact JSON object per line; return the count."""
    n = 0
    with atomic_open(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=2)
        fh.write("\n")
