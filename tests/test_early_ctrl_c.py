"""Ctrl-C in a recipe's first seconds (its imports, its argument parsing, the tokenizer's load) ends
it with one line and exit status 130: never a traceback, never an interrupt dropped in a `__del__`
while the run goes on to status 0. The filter and SFT commands as typed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slow import launches

from tests.support.recipes import stderr_tail

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {
    "filter_trajectories": ["--rollouts", "data/rollouts.jsonl", "--output", "{tmp}/sft.jsonl"],
    "sft_executor": ["--output_dir", "{tmp}/out", "--max_steps", "1"],
}
OFFSETS_S = {"filter_trajectories": [0.3, 0.8, 1.5], "sft_executor": [0.3, 0.8, 1.5, 3.0]}
"""The filter is done in about a second; SFT loads its tokenizer at 2-4 s. A fixed offset seldom
lands inside a `__del__` (tests/test_safe_interrupt.py puts one there)."""


@pytest.mark.faults
@pytest.mark.parametrize(
    ("recipe", "after_s"),
    [launches(r, r, t, id=f"{t}-{r}") for r, offsets in OFFSETS_S.items() for t in offsets],
)
def test_ctrl_c_in_the_first_seconds_is_one_line(recipe, after_s, tmp_path):
    args = [a.format(tmp=tmp_path) for a in COMMANDS[recipe]]
    proc = subprocess.Popen(
        [sys.executable, f"recipes/{recipe}.py", *args],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(after_s)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert "Traceback" not in stderr, stderr_tail(stderr)
    if proc.returncode == 0:
        pytest.skip(f"{recipe} finished within {after_s} s, before the signal")
    assert proc.returncode in (130, -signal.SIGINT), stderr_tail(stderr)
    if proc.returncode == 130:
        assert stderr.strip().splitlines()[-1].startswith("interrupted: "), stderr_tail(stderr)
