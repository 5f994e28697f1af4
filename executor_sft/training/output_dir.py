"""A training `output_dir` is the user's unless we made it: a non-empty folder without our mark is refused.

Training writes `README.md`, `config.json`, weights and checkpoints into `output_dir`, and a
relaunch resumes or finds a finished run there. So the folder is marked ours (`MARKER`) when a
run first claims it, empty or new, before any model loads; a later run in a marked folder
resumes or says it is done, and a folder with anything else in it is left alone.
"""

from __future__ import annotations

import errno
from pathlib import Path

from executor_sft.errors import OutputError
from executor_sft.files import check_output_dir, write_json

MARKER = "_executor_sft.json"
"""Marks an `output_dir` a run of ours made (a leading `_`: `push_to_hub` leaves it out)."""


def claim_output_dir(output_dir: str | Path, *, main_process: bool = True) -> None:
    """Refuse an `output_dir` we cannot or must not write; mark an empty or new one ours.

    Raises `OutputError` (one line) for a file in its place, a read-only or unwritable location,
    and a non-empty folder without `MARKER`. Only the main process writes the mark; the others
    may see its temporary file, which is not someone else's content.
    """
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        raise OutputError(errno.ENOTDIR, f"{path}: --output_dir is a file: name a directory")
    check_output_dir(path, "--output_dir")
    if (path / MARKER).is_file():
        return
    theirs = (
        sorted(p.name for p in path.iterdir() if not p.name.startswith(f".{MARKER}."))
        if path.exists()
        else []
    )
    if theirs:
        shown = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
        raise OutputError(
            errno.EEXIST,
            f"{path}: --output_dir is not empty and no executor_sft run made it (holds {shown}): "
            "choose another --output_dir, or empty it",
        )
    if main_process:
        write_json(path / MARKER, {"made_by": "executor_sft"})
