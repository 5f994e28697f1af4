"""recipes/filter_ablation.py: a bad YAML is one line before anything loads; the equal-steps rule;
the embedded default end to end (two variants, the same steps, evaluated, resumed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from forkserver import run_script
from one_line import one_error_line

from executor_sft.errors import ConfigError
from executor_sft.eval.ablation import equal_steps, load_ablation_config, run_ablation
from executor_sft.filters import FilterConfig, filter_episodes, iter_episodes_by_id
from tests.support.recipes import stderr_tail

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "filter_ablation.py"
DEFAULT = ROOT / "recipes" / "configs" / "filter_ablation.yaml"


def _run(config: Path, out: Path, *args: str, timeout: int = 300):
    command = [sys.executable, str(RECIPE), "--config", str(config), "--output_dir", str(out), *args]
    return run_script(command, cwd=ROOT, timeout=timeout)


def _config(tmp_path: Path, change) -> Path:
    """The default YAML with `change(data)` applied, written under `tmp_path`."""
    data = yaml.safe_load(DEFAULT.read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "ablation.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


BAD = {
    "unknown variant key": (lambda c: c["variants"][0].update(filtr={}), "field 'variants.0.filtr'"),
    "unknown filter key": (
        lambda c: c["variants"][1]["filter"].update(stratta=["all_correct"]),
        "field 'variants.1.filter.stratta'",
    ),
    "unknown stratum": (
        lambda c: c["variants"][1]["filter"].update(strata=["no_such"]),
        "unknown filter stratum 'no_such'",
    ),
    "missing rollouts": (
        lambda c: c.update(rollouts="data/gone.jsonl"),
        "field 'rollouts': data/gone.jsonl not found",
    ),
    "missing sub-queries": (
        lambda c: c["eval"].update(sub_queries="data/world/gone.jsonl"),
        "field 'eval.sub_queries': data/world/gone.jsonl not found",
    ),
    "missing filter file": (
        lambda c: c["variants"][0].update(filter="recipes/configs/gone.yaml"),
        "recipes/configs/gone.yaml: config file not found",
    ),
    "repeated name": (lambda c: c["variants"].append(c["variants"][0]), "names repeat"),
    "no steps": (lambda c: c.update(max_steps=0), "field 'max_steps'"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_config_is_one_line_and_nothing_is_written(case, tmp_path):
    change, expected = BAD[case]
    config = _config(tmp_path, change)
    line = one_error_line(_run(config, tmp_path / "out"))
    assert line.startswith(f"error: {config}") and expected in line, line
    assert not (tmp_path / "out").exists()  # refused before any rows, model or index


def test_a_variant_filter_may_be_the_filter_recipes_yaml(tmp_path):
    paper = "recipes/configs/filter_paper.yaml"
    config = load_ablation_config(_config(tmp_path, lambda c: c["variants"][0].update(filter=paper)))
    assert config.variants[0].filter == FilterConfig(teacher_single="all", max_records_per_question_stratum=1)


def test_an_evaluation_role_the_rollouts_lack_is_refused_before_training(tmp_path):
    config = load_ablation_config(_config(tmp_path, lambda c: c["eval"].update(role="nobody")))
    config.output_dir = str(tmp_path / "out")
    with pytest.raises(ConfigError, match="eval.role: 'nobody' is not a role of the rollouts"):
        run_ablation(config, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_rollouts_file_without_episodes_is_one_line(tmp_path):
    empty = tmp_path / "rollouts.jsonl"
    empty.write_text("", encoding="utf-8")
    config = _config(tmp_path, lambda c: c.update(rollouts=str(empty)))
    line = one_error_line(_run(config, tmp_path / "out"))
    assert line == f"error: {empty}: no episodes in the file; pass a collect_rollouts.py output", line
    assert not (tmp_path / "out").exists()


def test_equal_steps_default_to_two_epochs_of_the_largest_variant():
    assert equal_steps([79, 95], rows_per_step=1, max_steps=None) == 190
    assert equal_steps([79, 95], rows_per_step=8, max_steps=None) == 24  # 190 / 8, rounded up
    assert equal_steps([79, 95], rows_per_step=8, max_steps=4) == 4


@pytest.mark.slow
def test_a_bad_sft_config_or_an_empty_variant_is_one_line_before_any_model_loads(tmp_path):
    """Both are found after TRL's import (the SFT config is parsed by the SFT recipe's parser)."""
    sft = tmp_path / "sft.yaml"
    sft.write_text("max_stepz: 3\n", encoding="utf-8")
    config = _config(tmp_path, lambda c: c.update(sft_config=str(sft)))
    line = one_error_line(_run(config, tmp_path / "out"))
    assert line.startswith(f"error: {sft}:1: unknown key 'max_stepz'"), line
    assert not (tmp_path / "out").exists()
    config = _config(tmp_path, lambda c: c["variants"][1]["filter"].update(min_em=2.0))
    line = one_error_line(_run(config, tmp_path / "out"))
    assert line.startswith("error: data/rollouts.jsonl: variant 'all_correct' keeps no rows"), line
    assert not (tmp_path / "out" / "all_correct" / "model").exists()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_the_default_trains_every_variant_the_same_steps_evaluates_and_resumes(tmp_path):
    out = tmp_path / "ablation"
    proc = _run(DEFAULT, out, "--no_progress", timeout=1800)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    config = yaml.safe_load(DEFAULT.read_text(encoding="utf-8"))
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [v["variant"] for v in saved["variants"]] == [v["name"] for v in config["variants"]]
    # trained steps, read from each model's trainer state, equal and as the YAML sets them
    assert [v["steps"] for v in saved["variants"]] == [config["max_steps"]] * len(config["variants"])
    for variant, spec in zip(saved["variants"], config["variants"], strict=True):
        folder = out / spec["name"]
        rows = _lines(folder / "sft.jsonl")
        expected = filter_episodes(
            iter_episodes_by_id(ROOT / config["rollouts"]), FilterConfig(**spec["filter"])
        )
        assert rows == expected.rows and variant["rows"] == len(rows) == sum(variant["strata"].values())
        # evaluated on the held-out sub-queries with the prompt and tools the rows were trained on
        runs = [r["run"] for r in _lines(folder / "eval.jsonl")]
        assert len(runs) == variant["eval"]["n"] == config["eval"]["limit"] * config["eval"]["samples"]
        assert {r["messages"][0]["content"] for r in runs} == {rows[0]["messages"][0]["content"]}
        assert runs[0]["calls"][0]["tools"] == rows[0]["tools"]
        assert (folder / "done.json").is_file()
    assert len({v["rows"] for v in saved["variants"]}) == len(saved["variants"])  # the filters differ
    markdown = (out / "results.md").read_text(encoding="utf-8")
    assert proc.stdout.rstrip().endswith(markdown.rstrip())  # printed last, after the Trainer's logs
    for v in saved["variants"]:
        assert f"| {v['variant']} | {v['rows']} | {v['steps']} |" in markdown

    # A rerun reuses both; with one done file gone, that variant is evaluated again, not retrained.
    names = [v["name"] for v in config["variants"]]
    weights = {
        v: (out / v / "model" / "model.safetensors").stat().st_mtime_ns for v in ("strata", "all_correct")
    }
    again = _run(DEFAULT, out, "--no_progress")
    assert again.returncode == 0 and again.stderr.count("finished before") == 2, stderr_tail(again.stderr)
    assert json.loads((out / "results.json").read_text(encoding="utf-8")) == saved
    (out / names[-1] / "done.json").unlink()
    third = _run(DEFAULT, out, "--no_progress", timeout=1800)
    assert third.returncode == 0 and third.stderr.count("finished before") == 1, stderr_tail(third.stderr)
    assert (out / names[-1] / "done.json").is_file()
    assert {v: (out / v / "model" / "model.safetensors").stat().st_mtime_ns for v in weights} == weights
