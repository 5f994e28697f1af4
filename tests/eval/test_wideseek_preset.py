"""recipes/configs/wideseek_r1_preset.yaml: WideSeek-R1's budgets (App. D), loaded and run offline."""

from __future__ import annotations

from pathlib import Path

from executor_sft.eval import load_eval_config, run_eval
from executor_sft.synthetic import write_world

PRESET = Path(__file__).resolve().parents[2] / "recipes" / "configs" / "wideseek_r1_preset.yaml"


def test_the_preset_has_the_seeds_budgets():
    config = load_eval_config(PRESET)
    p = config.pipeline
    assert (p.max_parallel, p.max_rounds, p.max_turns, p.parallel_tool_calls) == (10, 10, 20, 5)
    assert p.tools == ["search", "open_document"] and config.samples == 4


def test_the_preset_runs_on_the_synthetic_wide_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_world(tmp_path / "runs" / "wide" / "world", 7, 300, 40, wide_share=0.15)
    # The scripted executor reads whole passages and never calls the access tool, and with the
    # access tool offered search results are snippets: the scripted run offers search alone.
    config = load_eval_config(PRESET, overrides={"samples": 1}, sets=["pipeline.tools=[search]"])
    results = run_eval(config).results
    # With P = 10 and 10 lead turns every wide task is filled: the scripted answerer's tables are right.
    assert results.average["em"] == 1.0 and results.average["f1"] == 1.0
