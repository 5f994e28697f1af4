"""Bad input gets one line on stderr and exit 2, before any model loads, and no input changes.

Each case writes its inputs into tmp_path, runs a recipe as a subprocess and checks: exit
status 2, stderr names the file (and line), no traceback, every input byte-identical after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLLOUTS = ROOT / "data" / "rollouts.jsonl"


def _head(path: Path, n: int) -> bytes:
    with path.open("rb") as fh:
        return b"".join(next(fh) for _ in range(n))


def run_recipe(recipe: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, f"recipes/{recipe}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@dataclass
class Case:
    """Inputs to write, the recipe's arguments, and what stderr must name."""

    name: str
    recipe: str
    files: Callable[[Path], dict[str, bytes]]
    args: Callable[[Path], list[str]]
    names: Callable[[Path], str]


def _rollouts(tmp: Path) -> bytes:
    return _head(ROLLOUTS, 3)


def _filter_args(tmp: Path, output: str = "sft.jsonl") -> list[str]:
    return ["--rollouts", str(tmp / "r.jsonl"), "--output", str(tmp / output), "--no-require-judge"]


FILTER_CASES = [
    Case(
        "filter-output-is-input",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t)},
        lambda t: _filter_args(t, "r.jsonl"),
        lambda t: f"{t / 'r.jsonl'}: output is the same file",
    ),
    Case(
        "filter-output-is-input-other-spelling",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t)},
        lambda t: _filter_args(t, "./../" + t.name + "/r.jsonl"),
        lambda t: "output is the same file",
    ),
    Case(
        "filter-report-is-input",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t)},
        lambda t: [*_filter_args(t), "--report", str(t / "r.jsonl")],
        lambda t: f"{t / 'r.jsonl'}: output is the same file",
    ),
    Case(
        "filter-missing-rollouts",
        "filter_trajectories.py",
        lambda t: {},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}: --rollouts file not found",
    ),
    Case(
        "filter-empty-rollouts",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": b""},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}: no episodes",
    ),
    Case(
        "filter-non-utf8",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t) + b'{"bad": "\xff"}\n'},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}:4: not UTF-8",
    ),
    Case(
        "filter-not-json",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _head(ROLLOUTS, 1) + b"not json\n" + _head(ROLLOUTS, 1)},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}:2: invalid JSON",
    ),
    Case(
        "filter-schema-v9",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t).replace(b"executor_sft.episode/v1", b"executor_sft.episode/v9")},
        _filter_args,
        lambda t: (
            f"{t / 'r.jsonl'}:1: field 'schema' is 'executor_sft.episode/v9'; this version reads 'executor_sft.episode/v1'"
        ),
    ),
    Case(
        "filter-schema-other",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t).replace(b'"executor_sft.episode/v1"', b'"something/else"', 1)},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}:1: field 'schema' is 'something/else'",
    ),
]

CASES = [*FILTER_CASES]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input(case: Case, tmp_path: Path) -> None:
    files = case.files(tmp_path)
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    proc = run_recipe(case.recipe, *case.args(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert case.names(tmp_path) in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] != []
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data, name


def test_filter_good_rerun_into_same_output(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_bytes(b"")
    assert run_recipe("filter_trajectories.py", *_filter_args(tmp_path)).returncode == 2
    assert not (tmp_path / "sft.jsonl").exists()
    (tmp_path / "r.jsonl").write_bytes(_rollouts(tmp_path))
    proc = run_recipe("filter_trajectories.py", *_filter_args(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sft.jsonl").read_text(encoding="utf-8").count("\n") > 0


def test_filter_no_schema_field_still_loads(tmp_path: Path) -> None:
    data = _rollouts(tmp_path).replace(b'"schema":"executor_sft.episode/v1",', b"")
    assert b'"schema"' not in data.split(b"\n")[0][:40]
    (tmp_path / "r.jsonl").write_bytes(data)
    proc = run_recipe("filter_trajectories.py", *_filter_args(tmp_path))
    assert proc.returncode == 0, proc.stderr


def test_filter_output_mode_follows_umask(tmp_path: Path) -> None:
    from executor_sft.filters import write_jsonl

    old = os.umask(0o022)
    try:
        write_jsonl(tmp_path / "out.jsonl", [{"a": 1}])
    finally:
        os.umask(old)
    assert (tmp_path / "out.jsonl").stat().st_mode & 0o777 == 0o644
