"""Append-only JSONL episode store that survives a killed writer, a full disk and a second writer.

Durability rule: each record is serialised to one line in memory and written with a single
`os.write` on an `O_APPEND` descriptor, then fsync'd. A SIGKILL can therefore leave at most
one partial *last* line, never a hole in the middle. Opening the store for writing cuts that
partial tail back to the last newline before anything is appended, so every complete record
is kept exactly once and the file stays valid JSONL. A write that fails part-way (a full disk)
is cut back the same way at once, before any later append: what the store counts is readable.

One process writes a store at a time (`store_lock.WriterLock` on `<file>.lock`), and a store
records the system that wrote it (`<stem>.system.json`, see `check_system`), so a resume with
another config or schema version cannot mix two systems' episodes in one file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from executor_sft.errors import InputError, UserError
from executor_sft.files import Located, iter_jsonl_sorted, iter_records, write_json
from executor_sft.schema import EPISODE_SCHEMA, Episode
from executor_sft.store_lock import WriterLock

logger = logging.getLogger(__name__)


def _episode_key(record: dict[str, Any]) -> str:
    return str(record["episode_id"])


def check_episode_record(path: str | Path, line: int, record: dict[str, Any]) -> dict[str, Any]:
    """`record`, or an `InputError` at `path:line` when it is not an episode (an SFT row, say)."""
    if isinstance(record.get("episode_id"), str):
        return record
    what = "an SFT row (it has 'messages')" if "messages" in record else "not an episode"
    raise InputError(
        f"{path}:{line}: {what}: a rollouts file holds episodes, each with an 'episode_id'; "
        "pass the rollouts file that collection wrote"
    )


def episode_line(episode: Episode) -> bytes:
    """An episode as the store writes it: one JSONL line (what a Ray actor sends its driver)."""
    # pydantic-core writes the JSON directly (~3x faster than model_dump + json.dumps, the
    # largest CPU cost per episode in collection). Same JSON values; it spells floats below
    # 1e-4 as 1e-5 rather than 1e-05 and writes non-finite floats as null.
    return episode.model_dump_json(by_alias=True).encode("utf-8") + b"\n"


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
    """Fail naming `file:line` on a bad line that is not the last, or on a record that is not an
    episode (an SFT row given as rollouts); return the lines checked.

    Only the last line can be cut short by a killed writer (the store removes it on open); a
    bad line before it is damage a resume must not build on, so it stops the run before any
    model loads.
    """
    path = Path(path)
    if not path.exists():
        return 0
    lines = path.read_bytes().split(b"\n")
    last = len(lines) - (1 if lines[-1] == b"" else 0)
    for i, raw in enumerate(lines[:last], start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            if i == last:  # a killed writer's torn line: the store drops it on open
                continue
            problem = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "invalid JSON"
            raise InputError(
                f"{path}:{i}: {problem}; only a killed writer's last line can be cut short, so this "
                "file is damaged: repair or delete that line, or move the file away to start over"
            ) from None
        if isinstance(record, dict):
            check_episode_record(path, i, record)
    return last


class StoreWriteError(UserError, ValueError):
    """The store (or a file beside it) could not be opened or written: a path or disk problem."""


class SystemChangedError(UserError, ValueError):
    """A store holds episodes of another system (config or schema version) than this run's."""


SHOWN_CHANGES = 4
_ABSENT = object()


def system_file(path: str | Path) -> Path:
    """Where the fingerprint of the system that wrote the store at `path` is kept."""
    path = Path(path)
    return path.with_name(path.stem + ".system.json")


def read_system(path: str | Path) -> dict[str, Any] | None:
    """The fingerprint recorded beside `path` (`schema` plus the writer's system record), or None."""
    file = system_file(path)
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        return {"schema": data["schema"], **data["system"]}
    except (ValueError, KeyError, TypeError):
        raise SystemChangedError(
            f"{file}: not a system record (JSON with schema and system); restore it or move the "
            "store away to start over"
        ) from None


def system_changes(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """`key.path: old -> new` for every leaf that differs between two fingerprints."""
    changes = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if a == b:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            changes += system_changes(a, b, f"{prefix}{key}.")
        else:
            changes.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return changes


def _short(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 40 else text[:37] + "..."


def check_system(
    path: Path, system: Mapping[str, Any], schemas: set[str], *, records: int, accept: bool = False
) -> None:
    """Refuse to add episodes of `system` to a store that holds another system's; record it if new.

    `records` is how many records the store holds and `schemas` the schema versions they
    carry. An empty store takes this run's system (whatever an earlier, deleted file left);
    so does a store with records but no record of its system (written before stores kept
    one), with a warning. `accept` adds the change to `accepted_changes` instead of refusing.
    """
    current = {"schema": EPISODE_SCHEMA, **system}
    if not records:
        _write_system(path, current, [])
        return
    stored = read_system(path)
    foreign = sorted(schemas - {EPISODE_SCHEMA})
    if stored is None:
        if not foreign:
            logger.warning("%s: no record of the system that wrote it; taking this run's", path)
            _write_system(path, current, [])
            return
        stored = {"schema": ", ".join(foreign)}
        compared = {"schema": EPISODE_SCHEMA}
    else:
        if foreign:
            stored = {**stored, "schema": ", ".join(foreign)}
        compared = current
    changes = system_changes(stored, compared)
    if not changes:
        return
    shown = "; ".join(changes[:SHOWN_CHANGES]) + (
        f"; and {len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else ""
    )
    if not accept:
        raise SystemChangedError(
            f"{path}: holds episodes of a different system (changed: {shown}); use a new output_dir "
            "to start a new file, or run with --accept_system_change (accept_system_change: true) "
            "to add this system's episodes to it"
        )
    logger.warning("%s: adding episodes of a changed system (accepted): %s", path, shown)
    earlier = _accepted_changes(path)
    _write_system(path, current, [*earlier, {"changed": changes, "previous": stored}])


def _accepted_changes(path: Path) -> list[Any]:
    file = system_file(path)
    if not file.is_file():
        return []
    return list(json.loads(file.read_text(encoding="utf-8")).get("accepted_changes", []))


def _write_system(path: Path, fingerprint: Mapping[str, Any], accepted: list[Any]) -> None:
    record: dict[str, Any] = {"schema": fingerprint["schema"]}
    record["system"] = {k: v for k, v in fingerprint.items() if k != "schema"}
    if accepted:
        record["accepted_changes"] = accepted
    file = system_file(path)
    try:
        write_json(file, record)
    except OSError as exc:
        raise StoreWriteError(f"{file}: cannot write the store's system record ({_reason(exc)})") from None


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class EpisodeStore:
    """JSONL store of finished records with resume by key, for one writing process at a time.

    `key` maps a record dict to its identity (default `episode_id`); `append` refuses a key
    already present, so a resumed job can never duplicate finished work. Opening takes the
    file's writer lock (`wait_for_lock`: wait for a holder instead of failing), then, when
    `system` is given, checks it against the system recorded beside the file (`check_system`;
    `accept_system_change` to add a changed system's episodes anyway).
    """

    def __init__(
        self,
        path: str | Path,
        key: Callable[[dict[str, Any]], str] = _episode_key,
        *,
        system: Mapping[str, Any] | None = None,
        accept_system_change: bool = False,
        wait_for_lock: bool = False,
    ):
        self.path = Path(path)
        self.key = key
        self.system = dict(system) if system is not None else None
        self._fd: int | None = None
        self._torn: int | None = None
        """Where the file must be cut back to before the next append (a failed write left bytes)."""
        with self._os_errors("open for writing"):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except FileExistsError:  # a file where a folder of the path should be
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None
            self._lock = WriterLock(self.path, wait=wait_for_lock)
        try:
            with self._os_errors("open for writing"):
                recover_jsonl(self.path)
                self._keys: set[str] = set()
                schemas: set[str] = set()
                for number, record in iter_records(self.path) if self.path.exists() else ():
                    if self.key is _episode_key:
                        check_episode_record(self.path, number, record)
                    self._keys.add(self.key(record))
                    if isinstance(record.get("schema"), str):
                        schemas.add(record["schema"])
            if self.system is not None:
                check_system(
                    self.path, self.system, schemas, records=len(self._keys), accept=accept_system_change
                )
        except BaseException:
            self._lock.release()
            raise

    @contextlib.contextmanager
    def _os_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise StoreWriteError(
                f"{self.path}: cannot {what} ({_reason(exc)}); check the path, its permissions and free space"
            ) from None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._lock.release()

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
                key = record.episode_id
                line = episode_line(record)
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

        For merging shard files this process knows to be complete and disjoint from the store
        (`merge_rollouts`); a key already present is an error, since nothing is filtered.
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

    @contextlib.contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Appends in this block are undone if it raises (a merge leaves no partial output)."""
        with self._os_errors("read"):
            start, keys = self.path.stat().st_size if self.path.exists() else 0, set(self._keys)
        try:
            yield
        except BaseException:
            self._keys = keys
            if self._fd is not None and os.fstat(self._fd).st_size != start:
                self._torn = start
                with contextlib.suppress(OSError):
                    self._cut(start)
            raise

    def _write(self, blob: bytes) -> None:
        """Append `blob` and fsync; on failure cut the file back to where it ended, then raise."""
        with self._os_errors("write"):
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if self._torn is not None:
                self._cut(self._torn)
            start = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, blob)
            while written < len(blob):  # a short write: a nearly full disk, or a huge record
                written += os.write(self._fd, blob[written:])
            os.fsync(self._fd)
        except OSError as exc:
            self._torn = start
            with contextlib.suppress(OSError):
                self._cut(start)
            raise StoreWriteError(
                f"{self.path}: writing {len(blob)} bytes failed ({_reason(exc)}); cut back to its "
                "last whole record, so a re-run redoes these episodes"
            ) from exc

    def _cut(self, offset: int) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, offset)
        os.fsync(self._fd)
        self._torn = None

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
    for number, record in iter_records(path, skip_torn_tail=True):
        yield check_episode_record(path, number, record)


def read_episode_models(path: str | Path) -> Iterator[Episode]:
    """`read_episodes` as `Episode`s: a record that is not one (a hand-edited line) is an
    `InputError` at its `file:line` naming the bad fields, not a validation traceback."""
    for number, record in iter_records(path, skip_torn_tail=True):
        record = check_episode_record(path, number, record)
        try:
            yield Episode.model_validate(record)
        except ValidationError as exc:
            problems = [
                f"field '{'.'.join(map(str, e['loc'])) or '<root>'}': {e['msg']}" for e in exc.errors()
            ]
            shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
            raise InputError(
                f"{path}:{number}: not an episode as collection writes it ({shown}); restore or remove "
                "the line, or collect into a new output_dir"
            ) from None


def iter_episodes_by_id(path: str | Path) -> Iterator[Located]:
    """The episodes of a rollouts file by episode id (ties: file order), each with its `file:line`.

    Every engine appends episodes in the order they finished, so a file's order depends on
    concurrency, engine, resume and merge order; reading by id makes what is computed from it
    (the filter's rows keep the first of identical runs) a function of the set of episodes.
    A record without a string `episode_id` comes first, for its reader to report. Streams as
    `iter_jsonl_sorted`: memory holds the ids, not the records.
    """
    return iter_jsonl_sorted(path, _id_order)


def _id_order(record: dict[str, Any]) -> tuple[int, str]:
    episode_id = record.get("episode_id")
    return (1, episode_id) if isinstance(episode_id, str) else (0, "")


def read_episode_lines(path: str | Path) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Each episode dict with its line exactly as written (newline-terminated), as `read_episodes`
    reads them: a merge copies the bytes, so floats keep the writer's spelling."""
    with Path(path).open("rb") as raw:
        at = 0
        for number, record in iter_records(path, skip_torn_tail=True):
            check_episode_record(path, number, record)
            while at < number:
                line, at = raw.readline(), at + 1
            yield record, line if line.endswith(b"\n") else line + b"\n"
