"""JSONL and JSON files: reading with `file:line` errors, atomic writing (a crash never leaves a half file).

The one I/O module of the package (layer 0: the standard library and `executor_sft.errors`). Readers yield
`(line_number, record)`; a line that is not UTF-8, not JSON or not an object raises
`MalformedLineError` naming the file and line. An unfinished last line (no trailing newline:
a writer was killed) is skipped with a warning where the caller asks for it (`skip_torn_tail`),
as the episode store does. Writers take `(path, rows)` and replace the file atomically.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from executor_sft.errors import UserError

logger = logging.getLogger(__name__)


class InputError(UserError, ValueError):
    """An input file or its content that cannot be used; the message is `file[:line]: what to do`."""


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named (a flag, a config field) does not exist; the message says how to get it."""


class MalformedLineError(InputError):
    """A JSONL line that is not a JSON object; the message names the file and line.

    `path` and `line` locate it and `problem` is the message without them (`invalid JSON (...)`).
    """

    def __init__(self, path: str | Path, line: int, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{path}:{line}: {problem}")


class RowError(UserError, ValueError):
    """A row that cannot be used for training: its message says where and why.

    `RowError(message)` for a malformed SFT row (the message names the file, line and field);
    `RowError(reason, detail)` for a run the filter cannot turn into a row, where `reason` is
    the exclusion reason and the message is `reason: detail`.
    """

    def __init__(self, reason: str, detail: str | None = None):
        self.reason = reason if detail is not None else None
        super().__init__(reason if detail is None else f"{reason}: {detail}")


class Located(NamedTuple):
    """A record and where it came from (`file:line`), for error messages."""

    where: str
    record: dict[str, Any]


def require_file(path: str | Path, flag: str) -> Path:
    """Fail with a one-line `InputError` when the input file `flag` names does not exist."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {flag} file not found; check the path")
    return path


def refuse_overwrite(inputs: Iterable[str | Path], outputs: Iterable[str | Path | None]) -> None:
    """Fail before anything is read when an output is one of the inputs (same file, any spelling)."""
    existing = [Path(p) for p in inputs if p is not None and Path(p).exists()]
    seen: list[Path] = []
    for out in (Path(o) for o in outputs if o is not None):
        for other in [*existing, *seen]:
            if _same_file(out, other):
                raise InputError(
                    f"{out}: output is the same file as {other}; writing it would destroy that data, "
                    "choose another output path"
                )
        seen.append(out)


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def iter_records(
    path: str | Path,
    *,
    skip_torn_tail: bool = False,
    skip_bad_lines: bool = False,
    require_object: bool = True,
) -> Iterator[tuple[int, Any]]:
    """Yield `(line_number, record)` for each non-blank line of a JSONL file, lazily.

    A line that is not UTF-8, not JSON, or (with `require_object`) not a JSON object raises
    `MalformedLineError`. `skip_torn_tail`: an unfinished last line (no trailing newline) that
    does not parse ends the file with a warning instead. `skip_bad_lines`: every bad line is
    skipped with a warning (a cache that may hold damaged lines).
    """
    path = Path(path)
    with path.open("rb") as fh:
        for i, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if skip_torn_tail and not raw.endswith(b"\n"):
                    logger.warning("%s:%d: skipping an unfinished last line", path, i)
                    return
                error = MalformedLineError(
                    path,
                    i,
                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "the file must be UTF-8 JSONL",
                )
            else:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    if skip_torn_tail and not line.endswith("\n"):
                        logger.warning("%s:%d: skipping an unfinished last line", path, i)
                        return
                    error = MalformedLineError(path, i, f"invalid JSON ({exc.msg} at column {exc.colno})")
                else:
                    if not require_object or isinstance(record, dict):
                        yield i, record
                        continue
                    error = MalformedLineError(
                        path, i, f"expected a JSON object, got {type(record).__name__}"
                    )
            if not skip_bad_lines:
                raise error from None
            logger.warning("%s: skipping this line", error)


def iter_jsonl(path: str | Path) -> Iterator[Located]:
    """Yield each JSON object of a JSONL file lazily with its `file:line`.

    Blank lines are skipped. A line that is not a JSON object raises ValueError naming the
    file and line (`MalformedLineError`), except an unfinished last line (no trailing newline: a writer was killed),
    which is skipped with a warning, as the episode store does.
    """
    for i, record in iter_records(path, skip_torn_tail=True):
        yield Located(f"{path}:{i}", record)


def read_jsonl(path: str | Path, *, skip_torn_tail: bool = False) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL file (errors as `iter_records`)."""
    return [record for _, record in iter_records(path, skip_torn_tail=skip_torn_tail)]


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[str]]:
    """Write to a temporary file next to `path`, then fsync and rename it over `path`.

    If the block raises, the temporary file is removed and `path` is left untouched. The file
    gets the mode a plain `open` would give (0644 under umask 022), not mkstemp's 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _current_umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
