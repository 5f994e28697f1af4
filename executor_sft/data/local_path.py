"""Telling a local data file from a Hub dataset id by its spelling, and naming the near miss.

`org/name` is a Hub id; `runs/sft.jsnol` is a typo of a local file, not a dataset to download
(which would retry for half a minute and end in a connection error). A name is local when it
starts with `/`, `.` or `~`, or has a `/` and a file extension, or ends in a data suffix;
`hf://org/name` is always the Hub.
"""

from __future__ import annotations

import difflib
from pathlib import Path

HUB_PREFIX = "hf://"
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


def names_a_local_file(name: str | Path) -> bool:
    text = str(name)
    if text.startswith(HUB_PREFIX):
        return False
    path = Path(text)
    return (
        path.exists()
        or text.startswith(("/", ".", "~"))
        or ("/" in text and bool(path.suffix))
        or path.suffix.lower() in DATA_SUFFIXES
    )


def nearest_file(path: str | Path) -> Path | None:
    """The file beside `path` whose name is closest to its name, if one is close."""
    path = Path(path).expanduser()
    folder = path.parent
    if not folder.is_dir():
        return None
    names = [p.name for p in folder.iterdir() if p.is_file()]
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    return folder / close[0] if close else None


def did_you_mean(path: str | Path) -> str:
    """'; did you mean 'runs/sft.jsonl'?' for a near file, else ''."""
    near = nearest_file(path)
    return f"; did you mean '{near}'?" if near else ""
