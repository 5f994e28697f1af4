"""Filter inputs: one-line errors for a missing input or an output that is an input.

JSONL reading with line locations and atomic writing live in `executor_sft.jsonl`; they are
re-exported here, where the filter API has always offered them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from executor_sft.jsonl import (
    InputError,
    Located,
    MalformedLineError,
    atomic_open,
    iter_jsonl,
    write_json,
    write_jsonl,
)

__all__ = [
    "InputError",
    "Located",
    "MalformedLineError",
    "atomic_open",
    "iter_jsonl",
    "refuse_overwrite",
    "require_file",
    "write_json",
    "write_jsonl",
]


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
