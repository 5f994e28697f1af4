"""A mistyped option or `--set` key on the config recipes' command lines is one line (issue 55, d01, d02, p01).

Each case is the user's command, run as a subprocess from the repository root: one `error:` line
per problem (a did-you-mean where a near name exists), exit status 2, nothing written, in seconds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script

REPO = Path(__file__).resolve().parents[1]
COLLECT = ["collect_rollouts.py", "--config", "recipes/configs/collect_minibench_offline.yaml"]
EVALUATE = ["evaluate.py", "--config", "recipes/configs/eval_minibench_smollm2.yaml"]
SWEEP = ["sweep.py", "--config", "recipes/configs/sweep_minibench.yaml"]


def error_lines(recipe: list[str], *args: str) -> list[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = run_script(
        [sys.executable, f"recipes/{recipe[0]}", *recipe[1:], *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), proc.stderr
    return lines


@pytest.mark.parametrize(
    "recipe, typed, meant",
    [
        (COLLECT, "--preflight_onl", "--preflight_only"),  # was taken as an abbreviation
        (COLLECT, "--output_d", "--output_dir"),
        (EVALUATE, "--preflight_onl", "--preflight_only"),
        (EVALUATE, "--sample", "--samples"),
        (SWEEP, "--preflight_onl", "--preflight_only"),
    ],
)
def test_a_mistyped_option_is_one_line_with_the_option_meant(recipe, typed, meant, tmp_path):
    args = [typed] if typed.startswith("--preflight") else [typed, str(tmp_path / "out")]
    assert error_lines(recipe, *args) == [
        f"error: command line: unknown option '{typed}': did you mean '{meant}'?"
    ]
    assert not (tmp_path / "out").exists()


def test_collect_takes_set_like_the_other_recipes(tmp_path):
    (line,) = error_lines(COLLECT, "--set", "samples_per_questio=2", "--preflight_only")
    assert line == (
        "error: recipes/configs/collect_minibench_offline.yaml: invalid config: field 'samples_per_questio': "
        "Extra inputs are not permitted; did you mean 'samples_per_question'?"
    )


def test_sweep_refuses_a_base_key_the_evaluation_does_not_know():
    assert error_lines(SWEEP, "--set", "base.samplez=2", "--preflight_only") == [
        "error: recipes/configs/sweep_minibench.yaml: base: invalid config: field 'samplez': "
        "Extra inputs are not permitted; did you mean 'samples'?"
    ]


@pytest.mark.parametrize(
    "key, field",
    [("output_dir.x", "output_dir"), ("questions.0.path.x", "questions.0.path")],
)
def test_set_into_a_plain_value_says_so(key, field):
    (line,) = error_lines(EVALUATE, "--set", f"{key}=1", "--preflight_only")
    assert line.startswith(f"error: --set {key}: '{field}' is a value (")
    assert line.endswith(f"not a mapping or a YAML file; set it whole: --set {field}=VALUE")


def test_every_problem_has_its_line_a_missing_questions_file_too(tmp_path):
    """p01: the questions file's line no longer hides the others."""
    lines = error_lines(
        EVALUATE,
        "--set", f"questions.0.path={tmp_path / 'no-questions.jsonl'}",
        "--set", f"models.backbone.questions={tmp_path / 'no-oracle.jsonl'}",
        "--set", f"models.executor.model={tmp_path / 'no-model'}",
        "--set", "models.answerer.model=offline:nope",
        "--set", f"models.judge.model={tmp_path}",
        "--set", f"questions.0.ids_file={tmp_path / 'no-ids.txt'}",
        "--preflight_only",
    )  # fmt: skip
    where = "error: recipes/configs/eval_minibench_smollm2.yaml"
    assert [line.split(": ")[2] for line in lines] == [
        "questions.0.path",
        "questions.0.ids_file",
        "models.backbone.questions",
        "models.answerer.model",
        "models.executor.model",
        "models.judge.model",
    ], lines
    assert all(line.startswith(where) for line in lines)
    assert "questions file not found" in lines[0]
