"""Read an evaluation set's id list: `eval_set.json` (its `ids`) or a text file, one id per line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from executor_sft.errors import InputError, MissingFileError


def read_ids(path: str | Path) -> list[str]:
    """The ids of an evaluation set, in file order; errors name the file and what to do."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(
            f"{path}: evaluation set not found; build it first with recipes/build_eval_set.py"
        )
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        ids = data.get("ids") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InputError(f"{path}: expected an object with 'ids': [string, ...] (an eval_set.json)")
    else:
        ids = [line.strip() for line in text.splitlines() if line.strip()]
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: repeated ids; an evaluation set lists each question once")
    return ids


def ids_digest(ids: list[str]) -> str:
    """A short content hash of an id list (cells of one table must share it)."""
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:16]
