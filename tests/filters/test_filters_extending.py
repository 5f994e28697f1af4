"""A user's own stratum (docs/architecture.md, "A filter stratum") in a real filter run."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_script

from executor_sft.filters import STRATA, FilterConfig, filter_episodes, iter_jsonl
from tests.support.docs import write_doc_module

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "filter_trajectories.py"
ROLLOUTS = REPO / "data" / "rollouts.jsonl"
USER_STRATUM = "my_strata:redundant_search"
PAPER = ["single_search", "info_gain_multi_search"]


def _filter(tmp_path: Path, *strata: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    return run_script(
        [sys.executable, str(RECIPE), "--rollouts", str(ROLLOUTS), "--output", str(tmp_path / "sft.jsonl"),
         "--report", str(tmp_path / "report.json"), "--strata", *strata],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip


def _redundant_runs() -> dict[str, tuple[str, str]]:
    """run_id -> (question id, dataset) of correct multi-search teacher runs with a correct re-run."""
    out = {}
    for located in iter_jsonl(ROLLOUTS):
        ep = located.record
        runs = ep["runs"]
        for r in runs:
            reruns = [c for c in runs if c["counterfactual_of"] == r["run_id"]]
            if (
                r["role"] == "teacher"
                and r["n_searches"] >= 2
                and r["outcome"]["em"] == 1
                and r["outcome"]["judge"] is True
                and any(c["outcome"]["em"] == 1 and c["outcome"]["judge"] is True for c in reruns)
            ):
                out[r["run_id"]] = (ep["question"]["id"], ep["question"]["dataset"])
    return out


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    write_doc_module("architecture.md", "A filter stratum", tmp_path, "my_strata")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("my_strata")
    sys.modules.pop("my_strata", None)


@pytest.mark.slow
def test_doc_stratum_selected_by_import_path_in_the_recipe(tmp_path, user_module):
    proc = _filter(tmp_path, *PAPER, USER_STRATUM)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text(encoding="utf-8").splitlines()]
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    mine = [r for r in rows if r["stratum"] == USER_STRATUM]
    expected = _redundant_runs()
    assert len(expected) == 18 and mine
    assert {r["source_run_id"] for r in mine} <= set(expected)
    assert all((r["question_id"], r["dataset"]) == expected[r["source_run_id"]] for r in mine)
    assert report["strata"][USER_STRATUM]["records"] == len(mine)
    assert report["strata"][USER_STRATUM]["by_role"] == {"teacher": len(mine)}
    assert "counterfactual_correct" not in report["exclusions"]  # the runs the user's stratum took
    paper = filter_episodes(iter_jsonl(ROLLOUTS), FilterConfig()).report
    for name in PAPER:  # the paper strata keep exactly their rows
        assert report["strata"][name] == paper["strata"][name]
    assert report["totals"]["rows"] == len(rows) == paper["totals"]["rows"] + len(mine)
    assert f"216 runs -> {len(rows)} rows" in proc.stderr


def test_doc_stratum_by_registered_name_matches_its_import_path(user_module):
    STRATA.register("redundant_search", user_module.redundant_search)
    try:
        by_name = filter_episodes(iter_jsonl(ROLLOUTS), FilterConfig(strata=["redundant_search"]))
    finally:
        STRATA.unregister("redundant_search")
    by_path = filter_episodes(iter_jsonl(ROLLOUTS), FilterConfig(strata=[USER_STRATUM]))
    assert by_name.rows and len(by_name.rows) == len(by_path.rows)
    assert [r["source_run_id"] for r in by_name.rows] == [r["source_run_id"] for r in by_path.rows]
    assert {r["stratum"] for r in by_name.rows} == {"redundant_search"}
    # alone, the paper strata's runs are switched off, not given to it
    assert by_name.report["exclusions"]["stratum_disabled"] > 0


@pytest.mark.slow
def test_unknown_stratum_is_one_line_exit_2(tmp_path):
    proc = _filter(tmp_path, "single_search", "redundant_serch")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "unknown filter stratum 'redundant_serch'" in line
    assert "info_gain_multi_search" in line  # the registered names are listed
    assert not (tmp_path / "sft.jsonl").exists()


def test_import_path_to_something_else_is_a_config_error():
    with pytest.raises(ValueError, match=r"filter stratum 'json:dumps' is a function, not an"):
        FilterConfig(strata=["json:dumps"])
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_module'"):
        FilterConfig(strata=["no_such_module:x"])
