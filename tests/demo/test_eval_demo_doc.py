"""docs/eval.md's evaluation demo: its command run as written, and every figure of its table
compared with the table the run prints.

CER-C orders the calls by their start time, so where a round's runs go in parallel it moves by
0.1 from run to run (docs/eval.md says so); it is compared within that, every other cell as written.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.recipes import stderr_tail

COMMAND = "python -m executor_sft.demos.eval_demo --out runs/eval-demo --questions 60"
SECTION = "## Example: a sweep on the synthetic world (offline, reproducible)"
SCHEDULED = {"CER-C": 0.1}  # column -> the spread the page states


def _table(text: str) -> list[dict[str, str]]:
    """The first Markdown table of `text` (its run of `|` lines) as rows of header -> cell."""
    all_lines = text.splitlines()
    start = next(i for i, line in enumerate(all_lines) if line.startswith("|"))
    lines = []
    for line in all_lines[start:]:
        if not line.startswith("|"):
            break
        lines.append(line)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "").strip()) <= set("-: "), lines[1]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]
    ]


def _differs(column: str, written: str, measured: str) -> bool:
    if column in SCHEDULED and written != measured:
        return abs(float(written) - float(measured)) > SCHEDULED[column] + 1e-9
    return written != measured


def figure_problems(page: str, doc: list[dict[str, str]], run: dict[str, dict[str, str]]) -> list[str]:
    """Each cell of `doc` (rows named by their first column) that is not what the run printed."""
    problems = []
    for row in doc:
        name, *columns = row
        cell = row[name]
        measured = run.get(cell)
        if measured is None:
            problems.append(f"{page}: row {row[name]!r}: no such cell in the run")
            continue
        problems += [
            f"{page}: {cell}, {c}: written {row[c]}, measured {measured[c]}"
            for c in columns
            if _differs(c, row[c], measured[c])
        ]
    return problems


@pytest.mark.slow
def test_every_figure_of_the_eval_demo_tables_is_what_the_run_prints(tmp_path):
    eval_page = (REPO_ROOT / "docs" / "eval.md").read_text(encoding="utf-8")
    section = eval_page.split(SECTION, 1)[1].split("\n## ", 1)[0]
    assert f"\n{COMMAND}\n" in section, "docs/eval.md no longer documents this command"
    proc = subprocess.run(
        [sys.executable, *COMMAND.split()[1:]],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    run = {row["cell"]: row for row in _table(proc.stdout)}
    assert "60 test\nquestions, k = 1" in section
    assert figure_problems("docs/eval.md", _table(section), run) == []


def test_a_figure_off_by_more_than_its_spread_is_named():
    run = {"a+b": {"cell": "a+b", "EM": "55.0", "CER-C": "99.1"}}
    assert figure_problems("p", [{"cell": "a+b", "EM": "55.0", "CER-C": "99.0"}], run) == []
    assert figure_problems("p", [{"cell": "a+b", "EM": "55.1", "CER-C": "98.9"}], run) == [
        "p: a+b, EM: written 55.1, measured 55.0",
        "p: a+b, CER-C: written 98.9, measured 99.1",
    ]
    assert figure_problems("p", [{"cell": "c+d", "EM": "1"}], run) == [
        "p: row 'c+d': no such cell in the run"
    ]
