"""Recipes run as a user runs them, in a subprocess of this interpreter, for tests that compare outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT


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
