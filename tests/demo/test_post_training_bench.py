"""bench/post_training_bench.py end to end on the tiny demo config: every stage, then a resumed re-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_modules import load_script

REPO = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("bench/post_training_bench.py", name="post_training_bench")


@pytest.mark.slow
def test_tiny_post_training_bench_measures_each_stage_and_resumes(tmp_path):
    bench = _bench()
    results = tmp_path / "post_training.md"
    argv = [
        "--config",
        str(REPO / "recipes" / "configs" / "demo_tiny.yaml"),
        "--questions",
        "0",
        "--per_type",
        "2",
        "--distill_steps",
        "1",
        "--grpo_steps",
        "1",
        "--max_completion_length",
        "48",
        "--out",
        str(tmp_path / "out"),
        "--results",
        str(results),
    ]
    assert bench.main(argv) == 0
    text = results.read_text(encoding="utf-8")
    for label in bench.STAGES.values():
        assert f"| {label} |" in text
    assert "Load average" in text and "| 1 | distill |" in text and "| 1 | grpo |" in text
    saved = json.loads(results.with_suffix(".json").read_text(encoding="utf-8"))
    stages = saved["seeds"][0]["stages"]
    assert list(stages) == ["teacher", "sft", "distill", "grpo"]
    # The teacher against itself is exactly 0; the SFT student, trained on other rows, is not.
    assert stages["teacher"]["eval"]["teacher_kl"] == 0.0
    assert stages["sft"]["eval"]["teacher_kl"] > 0.0
    for stage in stages.values():
        assert stage["eval"]["kl_tokens"] > 0 and stage["eval"]["n"] == stage["eval"]["kl_episodes"]
    assert [h["step"] for h in stages["distill"]["train_logs"]] == [1]
    assert "rewards/outcome/mean" in stages["grpo"]["train_logs"][0]

    stage_results = sorted((tmp_path / "out" / "seed1").glob("*/result.json"))
    before = {p: p.stat().st_mtime_ns for p in stage_results}
    assert bench.main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in stage_results} == before
    again = json.loads(results.with_suffix(".json").read_text(encoding="utf-8"))
    assert again["summary"] == saved["summary"]
