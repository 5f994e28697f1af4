"""`bench/demo_ablation.py --done_only` with a damaged done file: one line, exit 2, at once (issue 55, a01).

The command is the user's, as a subprocess; each done file is written as the damage leaves it.
The check runs before a seed's collection, so nothing is made under --out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script

from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
FIX = "delete it to redo this unit, or restore it (git checkout -- FILE)"


def _folder(path: Path) -> None:
    path.mkdir()


CASES = {
    "cut": (b'{"key": {"seed": 0}, "res', "invalid JSON (Unterminated string starting at, line 1 column 22)"),
    "empty": (b"", "empty"),
    "list": (b"[]\n", "holds a JSON list, not an object"),
    "non_utf8": (b'{"key": "\xe9"}', "not UTF-8 (byte 9)"),
    "folder": (_folder, "is a folder, not a JSON file"),
    "no_result": (b'{"key": {"seed": 0}}\n', "has no 'result'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_done_file_is_one_line(tmp_path, case):
    damage, what = CASES[case]
    done = tmp_path / "done" / "seed0-a.json"
    done.parent.mkdir()
    if callable(damage):
        damage(done)
    else:
        done.write_bytes(damage)
    proc = run_script(
        [
            sys.executable, "bench/demo_ablation.py", "--epochs", "1", "--done_only",
            "--done_dir", str(done.parent), "--seeds", "0", "--variants", "a",
            "--out", str(tmp_path / "out"), "--results", str(tmp_path / "out" / "results.md"),
        ],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"error: {done}: {what}; {FIX}"
    assert [s for s in proc.stderr.splitlines() if s.startswith("error:")] == [
        f"error: {done}: {what}; {FIX}"
    ]
    assert not (tmp_path / "out").exists()
