"""YAML configs: a key written twice in one mapping is an error naming both lines, at any depth."""

from __future__ import annotations

from pathlib import Path

import pytest
from forkserver import run_script
from slow import launches

from executor_sft.configfile import apply_overrides, read_yaml
from executor_sft.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("max_turns: 3\nk: 2\nmax_turns: 1\n", ":3: duplicate key 'max_turns' (first at line 1)"),
        (
            "pipeline:\n  max_turns: 3\n  budget: 2\n  max_turns: 1\n",
            ":4: duplicate key 'max_turns' (first at line 2)",
        ),
        (
            "questions:\n  - path: a.jsonl\n  - path: b.jsonl\n    limit: 1\n    path: c.jsonl\n",
            ":5: duplicate key 'path' (first at line 3)",
        ),
        ("models: {teacher: {model: a, model: b}}\n", ":1: duplicate key 'model' (first at line 1)"),
        ("1: a\n1: b\n", ":2: duplicate key '1' (first at line 1)"),
    ],
    ids=["top-level", "nested", "in-a-list", "flow", "non-string"],
)
def test_a_duplicate_key_names_both_lines(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        read_yaml(path)
    assert str(exc.value) == f"{path}{where}: keep one"


def test_merged_keys_may_be_overridden_as_yaml_intends(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {k: 3, budget: 1}\nrun:\n  <<: *b\n  k: 5\n", encoding="utf-8")
    assert read_yaml(path)["run"] == {"k": 5, "budget": 1}


def test_a_set_value_with_a_duplicate_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"--set pipeline: invalid YAML value \(duplicate key 'k'"):
        apply_overrides({}, ["pipeline={k: 1, k: 2}"])


def test_an_unknown_field_at_any_depth_names_the_nearest_declared_one(tmp_path: Path) -> None:
    from pydantic import BaseModel, ConfigDict

    from executor_sft.configfile import load_config

    class Pipeline(BaseModel):
        model_config = ConfigDict(extra="forbid")
        max_turns: int = 3

    class Cfg(BaseModel):
        model_config = ConfigDict(extra="forbid")
        pipeline: Pipeline = Pipeline()
        stages: list[Pipeline] = []

    path = tmp_path / "c.yaml"
    path.write_text("pipeline: {max_turns: 2}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"field 'pipeline.max_turn': .*did you mean 'max_turns'\?"):
        load_config(Cfg, path, sets=["pipeline.max_turn=3"])
    with pytest.raises(ConfigError, match=r"field 'pipelin': .*did you mean 'pipeline'\?"):
        load_config(Cfg, path, sets=["pipelin.max_turns=3"])
    with pytest.raises(ConfigError, match=r"field 'stages.0.max_turn': .*did you mean 'max_turns'\?"):
        load_config(Cfg, path, sets=["stages=[{max_turn: 1}]"])
    with pytest.raises(ConfigError) as far:
        load_config(Cfg, path, sets=["zzz=1"])
    assert "did you mean" not in str(far.value)


def test_trl_recipe_flags_are_never_abbreviated_and_a_typo_names_the_flag(capsys) -> None:
    from dataclasses import dataclass

    from executor_sft.configfile import parse_trl_args

    @dataclass
    class Args:
        max_steps: int = 1
        learning_rate: float = 1e-4

    for argv in (["--max_stepz", "2"], ["--max_step", "2"], ["--max_step=2"]):
        with pytest.raises(SystemExit) as stop:
            parse_trl_args((Args,), argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert (
            err.startswith("error: command line: unknown option '--max_step")
            and "did you mean '--max_steps'?" in err
        )
        assert len(err.splitlines()) == 1
    (args,) = parse_trl_args((Args,), ["--max_steps", "2"])
    assert args.max_steps == 2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        launches(
            "sft_executor",
            ["recipes/sft_executor.py", "--max_step", "2"],
            "unknown option '--max_step': did you mean '--max_steps'?",
            id="trl-flag-abbreviated",
        ),
        launches(
            "evaluate",
            [
                "recipes/evaluate.py",
                "--config",
                "recipes/configs/eval_minibench_smollm2.yaml",
                "--set",
                "pipeline.max_turn=3",
            ],
            "field 'pipeline.max_turn'",
            id="config-key-typo",
        ),
        launches(
            "evaluate",
            ["recipes/evaluate.py", "--config", "recipes/configs/eval_minibench_smollm2.yaml", "--conc", "8"],
            "--conc",
            id="config-recipe-flag-abbreviated",
        ),
    ],
)
def test_the_recipes_refuse_abbreviations_and_typos_in_one_line(argv, needle) -> None:
    """The cases a new user met, through the recipes as the docs run them: nothing is guessed."""
    import os
    import sys

    repo = Path(__file__).resolve().parents[1]
    proc = run_script(
        [sys.executable, *argv],
        cwd=repo,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert needle in last, proc.stderr
    if "max_turn" in needle:
        assert "did you mean 'max_turns'?" in last
