"""The width sweep config (recipes/configs/sweep_width_synthetic.yaml) run by its recipe on a synthetic world."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_script

from executor_sft.eval.budget_sweep import BudgetSweepConfig, load_rows
from executor_sft.synthetic import write_world
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "recipes" / "configs" / "sweep_width_synthetic.yaml"


def _recipe(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return run_script(
        [sys.executable, str(REPO / "recipes" / "budget_sweep.py"), *args, "--no_progress"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_width_sweep_config_writes_its_table_and_plot(tmp_path):
    write_world(
        tmp_path / "runs" / "wide" / "world", 7, 300, 120, wide_share=0.15
    )  # the path the config names
    proc = _recipe(tmp_path, "--config", str(CONFIG))
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    out = tmp_path / "runs" / "wide" / "width"
    rows = load_rows(out / "budget_sweep.json")
    assert [r.budgets for r in rows] == [{"P": p, "T": 3, "K": 3} for p in (1, 2, 4, 8, 10)]
    assert rows[0].n_table == 7 and rows[0].n_text == 0
    item = [r.item_f1_avg for r in rows]
    assert item == sorted(item) and item[0] < item[-1]  # wider rounds fill more cells at T = 3
    assert rows[0].success_avg == 0.0 and rows[-1].success_avg > 0.5
    assert [r.subagents for r in rows] == sorted(r.subagents for r in rows)
    table = (out / "budget_sweep.md").read_text()
    assert "| width | 10 | 3 | 3 | " in table and "item F1 Avg@1" in table and "success Pass@1" in table
    assert (out / "budget_sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (out / "cells").iterdir()) == [f"width-P{p}" for p in (1, 10, 2, 4, 8)]

    # A re-run finds every episode stored: nothing runs again, the same table comes back.
    again = _recipe(tmp_path, "--config", str(CONFIG))
    assert again.returncode == 0 and (out / "budget_sweep.md").read_text() == table
    results = json.loads((out / "cells" / "width-P4" / "results.json").read_text())
    assert results["name"] == "width width P=4"
    # The evaluation's own table rescores a table question by its cells: EM = success, F1 = item F1.
    p4 = rows[2]
    assert results["average"]["em"] == pytest.approx(p4.success_avg)
    assert results["average"]["f1"] == pytest.approx(p4.item_f1_avg)


def test_a_bad_axis_is_one_error_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CONFIG.read_text().replace("fixed: {max_rounds: 3, max_turns: 3}", "fixed: {max_parallel: 3}")
    )
    proc = _recipe(tmp_path, "--config", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().startswith(f"error: {bad}")
        and "max_parallel is both varied and fixed" in proc.stderr
    )


def test_depth_config_validates():
    from executor_sft.eval.budget_sweep import load_budget_sweep_config

    depth = load_budget_sweep_config(REPO / "recipes" / "configs" / "sweep_depth_synthetic.yaml")
    assert isinstance(depth, BudgetSweepConfig)
    assert [(a.field, a.fixed["max_parallel"]) for a in depth.axes] == [("max_turns", 1), ("max_rounds", 1)]
