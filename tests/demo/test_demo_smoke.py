"""The demo end to end with tiny settings (tiny random Qwen3, 2 SFT steps, 4 held-out sub-queries)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor_sft.demos.demo import load_config, run_demo

TINY = Path(__file__).resolve().parents[2] / "recipes" / "configs" / "demo_tiny.yaml"


@pytest.mark.slow
def test_demo_runs_end_to_end_and_evaluates_with_the_trained_prompt(tmp_path):
    cfg = load_config(TINY, {"out": str(tmp_path / "demo")})
    result = run_demo(cfg, show_progress=False)
    out = tmp_path / "demo"
    saved = json.loads((out / "results.json").read_text())
    assert saved["before"]["n"] == saved["after"]["n"] == cfg.eval_subqueries
    assert saved["teacher"]["em"] == 1.0 and saved["teacher"]["format_valid"] == 1.0
    assert saved["train_metrics"]["train_rows"] == sum(result.sft_rows.values()) > 0
    assert set(result.sft_rows) == {"single_search", "info_gain_multi_search"}
    assert "student after SFT" in (out / "results.md").read_text()
    assert not (out / "student-sft").exists()  # keep_checkpoint: false
    # The real student ran in collection on the first question(s) only.
    episodes = [json.loads(line) for line in (out / "rollouts.jsonl").open()]
    with_student = [e for e in episodes if any(r["role"] == "student" for r in e["runs"])]
    assert len(with_student) == cfg.student_questions
    # Evaluation prompts the student exactly as the SFT rows do (same system prompt and tools).
    rows = [json.loads(line) for line in (out / "sft.jsonl").open()]
    for name in ("eval_before.jsonl", "eval_after.jsonl"):
        runs = [json.loads(line)["run"] for line in (out / name).open()]
        assert len(runs) == cfg.eval_subqueries
        assert {r["messages"][0]["content"] for r in runs} == {rows[0]["messages"][0]["content"]}
        assert runs[0]["calls"][0]["tools"] == rows[0]["tools"]
    # No held-out sub-query reaches training.
    held_out = {json.loads(line)["question"] for line in (out / "world" / "subqueries_test.jsonl").open()}
    assert not held_out & {m["content"] for r in rows for m in r["messages"] if m["role"] == "user"}
