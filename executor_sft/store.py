"""Append-only JSONL episode store that survives a killed writer.

Durability rule: each record is serialised to one line in memory and written with a single
`os.write` on an `O_APPEND` descriptor, then fsync'd. A SIGKILL can therefore leave at most
one partial *last* line, never a hole in the middle. Opening the store for writing cuts that
partial tail back to the last newline before anything is appended, so every complete record
is kept exactly once and the file stays valid JSONL.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from executor_sft.jsonl import InputError, iter_records
from executor_sft.schema import Episode

logger = logging.getLogger(__name__)


def _episode_key(record: dict[str, Any]) -> str:
    return str(record["episode_id"])


def recover_jsonl(path: Path) -> int:
    """Truncate a partial or corrupt tail left by a killed writer; return bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        # Walk back over trailing lines that do not parse (a kill can only damage the tail).
        data = fh.read()
        end = len(data)
        while end > 0:
            if data[end - 1 : end] != b"\n":
                cut = data.rfind(b"\n", 0, end) + 1
            else:
                line_start = data.rfind(b"\n", 0, end - 1) + 1
                try:
                    json.loads(data[line_start : end - 1])
                    break
                except ValueError:
                    cut = line_start
            end = cut
        if end < size:
            fh.truncate(end)
            fh.flush()
            os.fsync(fh.fileno())
            logger.warning("%s: removed %d bytes of an unfinished last record", path, size - end)
    return size - end


def check_jsonl(path: str | Path) -> int:
    """Fail naming `file:line` on a bad line that is not the last; return the lines checked.

    Only the last line can be cut short by a killed writer (the store removes it on open); a
    bad line before it is damage a resume must not build on, so it stops the run before any
    model loads.
    """
    path = Path(path)
    if not path.exists():
        return 0
    lines = path.read_bytes().split(b"\n")
    last = len(lines) - (1 if lines[-1] == b"" else 0)
    for i, raw in enumerate(lines[: last - 1], start=1):
        if not raw.strip():
            continue
        try:
            json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            problem = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "invalid JSON"
            raise InputError(
                f"{path}:{i}: {problem}; only a killed writer's last line can be cut short, so this "
                "file is damaged: repair or delete that line, or move the file away to start over"
            ) from None
    return last


class EpisodeStore:
    """JSONL store of finished records with resume by key.

    `key` maps a record dict to its identity (default `episode_id`); `append` refuses a key
    already present, so a resumed job can never duplicate finished work.
    """

    def __init__(self, path: str | Path, key: Callable[[dict[str, Any]], str] = _episode_key):
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        recover_jsonl(self.path)
        self._keys: set[str] = {self.key(r) for r in self.iter_dicts()}
        self._fd: int | None = None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def completed_ids(self) -> set[str]:
        return set(self._keys)

    def append(self, record: Episode | dict[str, Any]) -> bool:
        """Write one record durably; return False (and write nothing) if its key exists."""
        return self.append_many([record]) == 1

    def append_many(self, records: list[Episode | dict[str, Any]]) -> int:
        """Write records durably with ONE write and ONE fsync (group commit); return how many were new.

        fsync is the slow part of a durable append (milliseconds per call), so a busy writer
        commits whatever has finished since its last write together. A kill mid-write can
        still only leave a partial last line, which the next open removes.
        """
        lines: list[bytes] = []
        keys: set[str] = set()
        for record in records:
            if isinstance(record, Episode) and self.key is _episode_key:
                # pydantic-core writes the JSON directly (~3x faster than model_dump + json.dumps,
                # the largest CPU cost per episode in collection). Same JSON values; it spells
                # floats below 1e-4 as 1e-5 rather than 1e-05 and writes non-finite floats as null.
                key = record.episode_id
                line = record.model_dump_json(by_alias=True).encode("utf-8") + b"\n"
            else:
                data = record.to_dict() if isinstance(record, Episode) else record
                key = self.key(data)
                line = (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
            if key in self._keys or key in keys:
                continue
            keys.add(key)
            lines.append(line)
        if not lines:
            return 0
        self._write(b"".join(lines))
        self._keys |= keys
        return len(lines)

    def append_lines(self, blob: bytes, keys: set[str]) -> None:
        """Append complete JSONL lines already serialised elsewhere (with their keys), one fsync.

        For merging part files this process knows to be complete and disjoint from the store
        (`collect_parallel`); a key already present is an error, since nothing is filtered.
        """
        if not blob:
            return
        if not blob.endswith(b"\n"):
            raise ValueError(f"{self.path}: appended lines must end with a newline")
        clash = keys & self._keys
        if clash:
            raise ValueError(f"{self.path}: {len(clash)} keys already stored, e.g. {sorted(clash)[0]}")
        self._write(blob)
        self._keys |= keys

    def _write(self, blob: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        written = os.write(self._fd, blob)
        while written < len(blob):  # os.write may be partial for huge records on some filesystems
            written += os.write(self._fd, blob[written:])
        os.fsync(self._fd)

    def iter_dicts(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        for _, record in iter_records(self.path):
            yield record

    def __iter__(self) -> Iterator[Episode]:
        for data in self.iter_dicts():
            yield Episode.model_validate(data)


def read_episodes(path: str | Path) -> Iterator[dict[str, Any]]:
    """Read episode dicts from a JSONL file (read-only; tolerates a partial last line)."""
    for _, record in iter_records(path, skip_torn_tail=True):
        yield record
