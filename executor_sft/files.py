"""JSONL and JSON files: reading with `file:line` errors, atomic writing (a crash never leaves a half file).

The one I/O module of the package (layer 0: the standard library and `executor_sft.errors`). Readers
yield `(line_number, record)` or `Located` records, in file order or in key order (`iter_jsonl_sorted`,
for outputs that must not depend on the order a file was written in); a line that is not UTF-8, not
JSON or not an object raises `MalformedLineError` naming the file and line. An unfinished last line (no trailing newline:
a writer was killed) is skipped with a warning where the caller asks for it (`skip_torn_tail`),
as the episode store does. Writers take `(path, rows)` and replace the file atomically; the
outputs are the user's: a symlink, FIFO or device is written through, never replaced, and a
write that cannot happen (full disk, read-only, a directory) is one `OutputError` line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from executor_sft.errors import InputError, MalformedLineError, OutputError, UserError

logger = logging.getLogger(__name__)


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
        for line in _scan(fh, path, skip_torn_tail, skip_bad_lines, require_object):
            yield line.number, line.record


class _Line(NamedTuple):
    number: int
    offset: int
    length: int
    record: Any


def _scan(
    fh: IO[bytes], path: Path, skip_torn_tail: bool, skip_bad_lines: bool, require_object: bool
) -> Iterator[_Line]:
    """The one line loop of the readers: each non-blank line's number, byte span and record."""
    offset = 0
    for i, raw in enumerate(fh, start=1):
        start, offset = offset, offset + len(raw)
        try:
            record = _parse_line(path, i, raw, require_object)
        except MalformedLineError as error:
            if skip_torn_tail and error.unparsable and not raw.endswith(b"\n"):
                logger.warning("%s:%d: skipping an unfinished last line", path, i)
                return
            if not skip_bad_lines:
                raise
            logger.warning("%s: skipping this line", error)
            continue
        if record is not _BLANK:
            yield _Line(i, start, len(raw), record)


_BLANK = object()


def _parse_line(path: Path, i: int, raw: bytes, require_object: bool) -> Any:
    """The record on line `i` (`_BLANK` for a blank line); a bad line raises `MalformedLineError`."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = (
            f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); the file must be UTF-8 JSONL"
        )
        raise MalformedLineError(path, i, problem, unparsable=True) from None
    if not line.strip():
        return _BLANK
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        problem = f"invalid JSON ({exc.msg} at column {exc.colno})"
        raise MalformedLineError(path, i, problem, unparsable=True) from None
    if require_object and not isinstance(record, dict):
        raise MalformedLineError(path, i, f"expected a JSON object, got {type(record).__name__}")
    return record


def iter_jsonl(path: str | Path) -> Iterator[Located]:
    """Yield each JSON object of a JSONL file lazily with its `file:line`.

    Blank lines are skipped. A line that is not a JSON object raises ValueError naming the
    file and line (`MalformedLineError`), except an unfinished last line (no trailing newline: a writer was killed),
    which is skipped with a warning, as the episode store does.
    """
    for i, record in iter_records(path, skip_torn_tail=True):
        yield Located(f"{path}:{i}", record)


def iter_jsonl_sorted(path: str | Path, key: Callable[[dict[str, Any]], Any]) -> Iterator[Located]:
    """`iter_jsonl` in `key` order (ties: file order), holding only each line's key and place.

    Two passes: the first parses every line and keeps `(key, line number, byte span)`, the
    second seeks to each line in sorted order and parses it again, so memory grows with the
    keys, not the records. Errors and the unfinished last line are as `iter_jsonl`'s, and a
    malformed line fails in the first pass, before anything is yielded.
    """
    path = Path(path)
    with path.open("rb") as fh:
        index = [
            (key(line.record), line.number, line.offset, line.length)
            for line in _scan(fh, path, skip_torn_tail=True, skip_bad_lines=False, require_object=True)
        ]
        index.sort(key=lambda entry: entry[0])  # stable: equal keys keep their file order
        for _, number, offset, length in index:
            fh.seek(offset)
            yield Located(f"{path}:{number}", _parse_line(path, number, fh.read(length), True))


def read_jsonl(path: str | Path, *, skip_torn_tail: bool = False) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL file (errors as `iter_records`)."""
    return [record for _, record in iter_records(path, skip_torn_tail=skip_torn_tail)]


def read_json_object(path: str | Path, fix: str) -> dict[str, Any]:
    """The JSON object a file holds; anything else (a folder, not UTF-8, cut, empty, a list) is an
    `InputError` naming the file, what is wrong and `fix` (what the user can do about it)."""
    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except IsADirectoryError:
        what = "is a folder, not a JSON file"
    except UnicodeDecodeError as exc:
        what = f"not UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        what = (
            "empty"
            if not exc.doc.strip()
            else f"invalid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        )
    else:
        if isinstance(data, dict):
            return data
        what = f"holds a JSON {type(data).__name__}, not an object"
    raise InputError(f"{path}: {what}; {fix}")


_ADVICE = {
    errno.ENOSPC: "the disk is full: free some space or choose another output",
    errno.EDQUOT: "the disk quota is exceeded: free some space or choose another output",
    errno.EFBIG: "the file is too large for this file system: choose another output",
    errno.EROFS: "the file system is read-only: choose another output",
    errno.EACCES: "permission denied: choose another output or fix its permissions",
    errno.EPERM: "permission denied: choose another output or fix its permissions",
    errno.EISDIR: "is a directory: name a file",
    errno.ENOTDIR: "a parent of it is a file, not a directory: choose another output",
    errno.EEXIST: "a parent of it is a file, not a directory: choose another output",
}
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""Errors only a write can raise: an `OSError` with one of these is an output's, never an input's."""


def output_error(path: str | Path, exc: OSError) -> OutputError:
    """The one-line `OutputError` for an `OSError` met while writing `path`."""
    advice = _ADVICE.get(exc.errno, f"cannot write ({exc.strerror or exc}): choose another output")
    return OutputError(exc.errno, f"{path}: {advice}")


def as_output_error(path: str | Path, exc: BaseException) -> OutputError | None:
    """The `OutputError` for a full disk or read-only file system behind `exc`, else None.

    Libraries wrap the `OSError` (safetensors, torch and FAISS raise their own types naming the
    OS error; numpy raises one with no errno; torch.save's writer a `RuntimeError`), so the cause
    chain is searched for the errno, then for its text; an `OSError` without one, or torch's
    writer failing, counts as a full disk when `path`'s disk has no room.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OutputError):
            return seen
        if isinstance(seen, OSError) and seen.errno in WRITE_ERRNOS:
            return output_error(path, seen)
        for code in WRITE_ERRNOS:
            if os.strerror(code) in str(seen):
                return output_error(path, OSError(code, os.strerror(code)))
        unnamed = isinstance(seen, OSError) and seen.errno is None
        if (unnamed or _is_torch_write_failure(seen)) and _disk_is_full(Path(path)):
            return output_error(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def output_errors(path: str | Path) -> Iterator[None]:
    """A full disk or read-only file system met in the block becomes the one-line `OutputError`."""
    try:
        yield
    except UserError:  # already one line about its own file (a cache entry, an input)
        raise
    except Exception as exc:
        if (error := as_output_error(path, exc)) is None:
            raise
        raise error from exc


def _is_torch_write_failure(exc: BaseException) -> bool:
    """torch.save's C++ writer failing (`[enforce fail at inline_container.cc:...] unexpected pos`):
    a `RuntimeError` that names no errno, raised when the disk fills under a checkpoint."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("inline_container.cc" in text or "PytorchStreamWriter" in text)


def _disk_is_full(path: Path) -> bool:
    """Whether the file system `path` is (or would be) on has under 1 MiB left."""
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        fs = os.statvfs(path)
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < 1 << 20


def check_output_file(path: str | Path, flag: str) -> None:
    """Fail before any work when the file `flag` names cannot be written where it is.

    Refuses a directory, a block device or socket, a parent that is a file, and a read-only or
    unwritable directory. A FIFO or character device (`/dev/null`) is fine: it is written through.
    """
    path = Path(path)
    kind = _writable_kind(
        path, f"{flag} is a directory: name a file", f"{flag} is a device or socket: name a regular file"
    )
    if kind == "through":
        return
    check_output_dir(Path(os.path.realpath(path)).parent, flag)


def check_output_dir(directory: str | Path, flag: str) -> None:
    """Fail when files cannot be created in `directory` (made if missing): a file in its place,
    a read-only file system, no permission."""
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(errno.ENOTDIR, f"{existing}: {flag} needs a directory here, but it is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        readonly = os.statvfs(existing).f_flag & os.ST_RDONLY
        code = errno.EROFS if readonly else errno.EACCES
        raise OutputError(code, f"{existing}: {flag}: {_ADVICE[code]}")


def _writable_kind(path: Path, is_dir: str, is_device: str) -> str:
    """`_target_kind`, with a directory (`is_dir`) or a block device or socket (`is_device`) an `OutputError`."""
    kind = _target_kind(path)
    if kind == "dir":
        raise OutputError(errno.EISDIR, f"{path}: {is_dir}")
    if kind == "refuse":
        raise OutputError(errno.EPERM, f"{path}: {is_device}")
    return kind


def _target_kind(path: Path) -> str:
    """How `atomic_open` writes `path`: "new" or "replace" a regular file, write "through" a FIFO or
    character device, "refuse" a block device or socket, or "dir"."""
    try:
        mode = path.stat().st_mode  # follows a symlink to what it names
    except (FileNotFoundError, NotADirectoryError):  # a parent that is a file fails when it is made
        return "new"
    if stat.S_ISREG(mode):
        return "replace"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "through"
    return "refuse"


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[str]]:
    """Write to a temporary file next to `path`, then fsync and rename it over `path`.

    If the block raises, or a SIGTERM ends the process, the temporary file is removed and `path`
    is left as it was. A symlink stays a link: the file it names is replaced. A FIFO or character
    device (`/dev/null`) is written through, never replaced; a directory, block device or socket
    is refused. A full disk or read-only output raises `OutputError` (one line). The file gets the
    mode a plain `open` would give (0644 under umask 022), not mkstemp's 0600.
    """
    path = Path(path)
    kind = _writable_kind(path, _ADVICE[errno.EISDIR], "is a block device or socket: name a regular file")
    if kind == "through":
        with _any_error_is_output(path):
            fh = path.open("w", encoding="utf-8")
        with _closing(fh, path, sync=False):
            yield fh
        return
    target = Path(os.path.realpath(path))
    with _any_error_is_output(path):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with _removed_on_failure(tmp):
        fh = os.fdopen(fd, "w", encoding="utf-8")
        with _closing(fh, path, sync=True):
            yield fh
        with _any_error_is_output(path):
            os.chmod(tmp, 0o666 & ~_current_umask())
            os.replace(tmp, target)


@contextlib.contextmanager
def _closing(fh: IO[str], path: Path, *, sync: bool) -> Iterator[None]:
    """Run the caller's block on `fh`, then flush (and fsync) it and close it.

    In the block only a write's errors are the output's (a failing input read passes unchanged);
    flushing is all output. Closing after a failure cannot matter: the output is abandoned.
    """
    try:
        try:
            yield
        except OSError as exc:
            if exc.errno in WRITE_ERRNOS and not isinstance(exc, OutputError):
                raise output_error(path, exc) from exc
            raise
        with _any_error_is_output(path):
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
    finally:
        with contextlib.suppress(OSError):
            fh.close()


@contextlib.contextmanager
def _any_error_is_output(path: Path) -> Iterator[None]:
    """Every `OSError` of the block (making, flushing, renaming the output) is the output's."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise output_error(path, exc) from exc


_pending: set[str] = set()
"""Temporary files of writes in progress in this process, removed if a SIGTERM ends it."""
_sigterm_before: Any = signal.SIG_DFL


@contextlib.contextmanager
def _removed_on_failure(tmp: str) -> Iterator[None]:
    """Remove `tmp` if the block fails or a SIGTERM arrives (the process then dies of it as before)."""
    installed = _install_sigterm_cleanup()
    _pending.add(tmp)
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        _pending.discard(tmp)
        if installed:
            signal.signal(signal.SIGTERM, _sigterm_before)


def _install_sigterm_cleanup() -> bool:
    """Put `_on_sigterm` in front of the SIGTERM handler (main thread only); True if this call did."""
    global _sigterm_before
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        return False
    _sigterm_before = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def _on_sigterm(signum: int, frame: Any) -> None:
    """Remove the pending temporary files, then do what SIGTERM did before (by default: die of it)."""
    for tmp in list(_pending):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    _pending.clear()
    before = _sigterm_before
    if callable(before):
        before(signum, frame)
    elif before != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


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


def write_text(path: str | Path, text: str) -> None:
    """Write `text` atomically (as `atomic_open`)."""
    with atomic_open(path) as fh:
        fh.write(text)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=2)
        fh.write("\n")
