"""recipes/filter_trajectories.py end to end as a subprocess, and its atomic output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from filters_helpers import episode, run
from forkserver import run_script

from executor_sft.filters import FilterConfig, filter_episodes, iter_jsonl
from executor_sft.store import EpisodeStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "filter_trajectories.py"


def _write_rollouts(path: Path) -> None:
    with EpisodeStore(path) as store:
        store.append(
            episode(
                "e1",
                [
                    run("s1", "student", 1, judge=None),
                    run("t1", "teacher", 1),
                    run("t2", "teacher", 2, sub_query_index=1),
                    run("b2", "teacher_budget1", 1, em=0.0, counterfactual_of="t2", sub_query_index=1),
                ],
                qid="q1",
            )
        )
        store.append(
            episode(
                "e2",
                [run("s3", "student", 2), run("t3", "teacher", 1, judge=False)],
                qid="q2",
                dataset="2wiki",
            )
        )


def _recipe(*args: str) -> subprocess.CompletedProcess:
    return run_script([sys.executable, str(RECIPE), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_recipe_round_trip(tmp_path):
    rollouts = tmp_path / "rollouts.jsonl"
    _write_rollouts(rollouts)
    cfg_file = tmp_path / "filter.yaml"
    cfg_file.write_text("min_searches: 2\ntool_arguments: json\n", encoding="utf-8")
    out, report = tmp_path / "out" / "sft.jsonl", tmp_path / "out" / "report.json"
    proc = _recipe(
        "--config", str(cfg_file),
        "--rollouts", str(rollouts),
        "--output", str(out),
        "--report", str(report),
        "--no_require_judge",
        "--teacher_single", "all",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected = filter_episodes(
        iter_jsonl(rollouts),
        FilterConfig(require_judge=False, teacher_single="all", tool_arguments="json"),
    )
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == json.loads(json.dumps(expected.rows))
    assert [r["source_run_id"] for r in rows] == ["s1", "t1", "t2", "t3"]
    assert isinstance(rows[2]["messages"][2]["tool_calls"][0]["function"]["arguments"], str)
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written == json.loads(json.dumps(expected.report))
    assert written["config"]["require_judge"] is False and written["config"]["teacher_single"] == "all"
    assert written["exclusions"] == {"counterfactual_role": 1, "student_multi_search": 1}
    assert "SFT composition" in proc.stderr and "2 episodes, 6 runs -> 4 rows (2 questions)" in proc.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.json", "sft.jsonl"]


@pytest.mark.slow
def test_recipe_failure_leaves_previous_output(tmp_path):
    rollouts = tmp_path / "rollouts.jsonl"
    _write_rollouts(rollouts)
    with rollouts.open("a", encoding="utf-8") as fh:
        fh.write('{"episode_id": "e3", "question": {"id": "q3"}, "runs": [{"run_id": "x"}]}\n')
    out = tmp_path / "sft.jsonl"
    out.write_text("previous\n", encoding="utf-8")
    proc = _recipe("--rollouts", str(rollouts), "--output", str(out))
    assert proc.returncode != 0
    assert f"{rollouts}:3: field 'runs[0].role' is missing" in proc.stderr
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollouts.jsonl", "sft.jsonl"]
