"""Recipes run as a user runs them, in a subprocess of this interpreter, for tests that compare outputs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT

# One frame of a native stack dump (Ray's and glog's crash handlers): "/lib/x.so(sym+0x1) [0x7f..] sym".
_NATIVE_FRAME = re.compile(r"^\s*\S+\([^)]*\) \[0x[0-9a-f]+\]")


def stderr_tail(stderr: str, limit: int = 3000) -> str:
    """The last `limit` characters of a subprocess's stderr without native stack frames.

    A crash in a compiled library prints dozens of frames after its one-line cause; an assertion
    message cut to the tail would then show frames only, as a Ray crash in CI once did.
    """
    kept = [line for line in stderr.splitlines() if not _NATIVE_FRAME.match(line)]
    dropped = stderr.count("\n") + 1 - len(kept)
    note = f"\n[{dropped} native stack frames left out]" if dropped > 0 else ""
    return "\n".join(kept)[-limit:] + note


def filter_recipe_output(rollouts: Path, out: Path, timeout_s: float = 120) -> bytes:
    """`recipes/filter_trajectories.py` on `rollouts` into `out`: its rows' bytes, then its report's."""
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "recipes" / "filter_trajectories.py"),
            "--rollouts",
            str(rollouts),
            "--output",
            str(out / "sft.jsonl"),
            "--report",
            str(out / "report.json"),
        ],
        check=True,
        capture_output=True,
        cwd=REPO_ROOT,
        timeout=timeout_s,
    )
    return (out / "sft.jsonl").read_bytes() + (out / "report.json").read_bytes()
