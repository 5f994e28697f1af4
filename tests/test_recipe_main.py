"""`run_recipe`, the one way a recipe ends: small real mains run as commands, each ending one way
(a user's mistake, a bug, Ctrl-C, SIGTERM, a signal-stopped run, a full or read-only disk), and
every recipe in recipes/ ending through it."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from one_line import one_error_line

from executor_sft.errors import INTERRUPTED
from executor_sft.recipe_main import TERMINATED
from tests.support.disks import remount, small_tmpfs

ROOT = Path(__file__).resolve().parents[1]

MAINS = """
import os, signal, sys, time
from executor_sft.errors import ConfigError, StoppedBySignal
from executor_sft.files import output_errors
from executor_sft.recipe_main import run_recipe

def user_error(out):
    raise ConfigError("cfg.yaml:3: a value the user can fix")

def bug(out):
    raise ValueError("a bug deep inside the run")

def sleep(out):
    print("started", flush=True)
    time.sleep(60)

class CtrlCInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)

def ctrl_c_in_del(out):  # the interrupt lands in a `__del__`; Python alone would drop it
    CtrlCInDel()
    time.sleep(5)
    print("ran on after Ctrl-C", flush=True)

def stopped(out):
    raise StoppedBySignal("SIGTERM: stopped at step 3 of 9; run the same command again", 15)

def status(out):
    return 1

def fill(out):  # a write the recipe knows is its output
    with output_errors(out), open(out, "w") as f:
        f.write("x" * 1_000_000)

def fill_unnamed(out):  # a full disk met where no output was named
    with open(out, "w") as f:
        f.write("x" * 1_000_000)

def create(out):  # the file system refuses the open itself
    open(out, "w").close()

run_recipe(globals()[sys.argv[1]], sys.argv[2])
"""


def _command(tmp_path: Path, name: str, out: Path | str = "unused") -> list[str]:
    script = tmp_path / "mains.py"
    script.write_text(MAINS, encoding="utf-8")
    return [sys.executable, str(script), name, str(out)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run(tmp_path: Path, name: str, out: Path | str = "unused") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(tmp_path, name, out), capture_output=True, text=True, env=_env(), timeout=60
    )


def test_a_user_error_is_one_line_and_exit_2(tmp_path):
    assert one_error_line(run(tmp_path, "user_error")) == "error: cfg.yaml:3: a value the user can fix"


def test_a_bug_keeps_its_traceback_and_exit_1(tmp_path):
    proc = run(tmp_path, "bug")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: a bug deep inside the run" in proc.stderr
    assert "error:" not in proc.stderr


def test_an_int_returned_is_the_exit_status(tmp_path):
    proc = run(tmp_path, "status")
    assert (proc.returncode, proc.stderr) == (1, "")


def test_a_run_stopped_by_a_signal_says_where_it_stands(tmp_path):
    proc = run(tmp_path, "stopped")
    assert proc.returncode == 143
    assert proc.stderr.splitlines() == [
        "interrupted: SIGTERM: stopped at step 3 of 9; run the same command again"
    ]


def test_ctrl_c_landing_in_a_del_still_stops_the_run(tmp_path):
    proc = run(tmp_path, "ctrl_c_in_del")
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (130, "", [INTERRUPTED])


@pytest.mark.faults
@pytest.mark.parametrize(
    ("signum", "line", "status"),
    [(signal.SIGINT, INTERRUPTED, 130), (signal.SIGTERM, TERMINATED, -signal.SIGTERM)],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_during_the_run_is_one_line(tmp_path, signum, line, status):
    """Ctrl-C exits 130; SIGTERM dies of the signal after its line (143 in a shell), so a
    parent still sees a terminated child."""
    proc = subprocess.Popen(
        _command(tmp_path, "sleep"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert proc.stdout.readline() == "started\n"
    time.sleep(0.2)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert (proc.returncode, stderr.splitlines()) == (status, [line])


@pytest.mark.faults
def test_a_full_disk_is_one_line_naming_the_output(tmp_path):
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        line = one_error_line(run(tmp_path, "fill", disk / "out.txt"))
        assert (
            line == f"error: {disk / 'out.txt'}: the disk is full: free some space or choose another output"
        )
        line = one_error_line(run(tmp_path, "fill_unnamed", disk / "other.txt"))
        assert line.endswith(": the disk is full: free some space or choose another output")


@pytest.mark.faults
def test_a_read_only_disk_is_one_line_naming_the_file(tmp_path):
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        remount(disk, "ro")
        line = one_error_line(run(tmp_path, "create", disk / "out.txt"))
        assert line == f"error: {disk / 'out.txt'}: the file system is read-only: choose another output"


def test_dev_full_is_one_line(tmp_path):
    """/dev/full answers every write with ENOSPC: the unmounted stand-in for a full disk."""
    line = one_error_line(run(tmp_path, "fill_unnamed", "/dev/full"))
    assert line.endswith(": the disk is full: free some space or choose another output")


def _calls_run_recipe_in_main_block(path: Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
            return any(ast.unparse(c.func) == "run_recipe" for c in calls)
    return False


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.py")), ids=lambda p: p.name)
def test_every_recipe_ends_through_run_recipe(recipe: Path):
    """A new recipe cannot skip it: its `__main__` block calls `run_recipe`."""
    assert _calls_run_recipe_in_main_block(recipe), f"{recipe.name}: end it with run_recipe(main)"
