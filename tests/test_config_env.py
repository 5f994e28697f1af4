"""`${NAME}` / `${NAME:-default}` in YAML configs: the one way a config finds the shared data."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script

from executor_sft.configfile import read_yaml
from executor_sft.errors import ConfigError
from executor_sft.rollout import load_collect_config
from tests.support.paths import REPO_ROOT


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_strings_expand_from_the_environment_or_their_default(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_HOME", "/data/here")
    monkeypatch.setenv("EMPTY_ONE", "")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    path = write(
        tmp_path / "c.yaml",
        "a: ${DATA_HOME}/x.jsonl\n"
        "b: ${NOT_SET_HERE:-../shared}/y.jsonl\n"
        "c: ${EMPTY_ONE:-fallback}\n"
        "d: [1, true, 'cost $5', '$DATA_HOME', {e: '${DATA_HOME:-no}'}]\n",
    )
    assert read_yaml(path) == {
        "a": "/data/here/x.jsonl",
        "b": "../shared/y.jsonl",
        "c": "fallback",  # empty counts as unset, as the shell's :- does
        "d": [1, True, "cost $5", "$DATA_HOME", {"e": "/data/here"}],  # only ${...} is a reference
    }


def test_an_unset_variable_without_default_names_the_file_and_field(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    path = write(tmp_path / "c.yaml", "questions:\n  - path: ${NOT_SET_HERE}/q.jsonl\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert str(err.value) == (
        f"{path}: field 'questions.0.path': ${{NOT_SET_HERE}} is not set; "
        "export it, or give a default as ${NOT_SET_HERE:-DEFAULT}"
    )


@pytest.mark.parametrize("shared", [None, "/elsewhere/shared"])
def test_the_offline_collect_config_follows_executor_sft_shared(monkeypatch, shared):
    if shared is None:
        monkeypatch.delenv("EXECUTOR_SFT_SHARED", raising=False)
    else:
        monkeypatch.setenv("EXECUTOR_SFT_SHARED", shared)
    config = load_collect_config(REPO_ROOT / "recipes" / "configs" / "collect_minibench_offline.yaml")
    root = shared or "../shared"
    assert config.questions.path == f"{root}/minibench/questions.jsonl"
    assert config.retriever.corpus == f"{root}/minibench/corpus.jsonl"
    assert config.models["backbone"].questions == config.questions.path


def test_a_trl_recipe_config_expands_the_same_way(tmp_path):
    """The filter recipe (TrlParser dataclasses) reads `rollouts:` through the same expansion."""
    where = tmp_path / "somewhere"
    where.mkdir()
    (where / "rollouts.jsonl").write_bytes((REPO_ROOT / "data" / "rollouts.jsonl").read_bytes())
    config = write(
        tmp_path / "filter.yaml",
        "rollouts: ${MY_ROLLOUTS_DIR}/rollouts.jsonl\noutput: ${MY_OUT:-" + str(tmp_path) + "}/sft.jsonl\n",
    )
    env = {**os.environ, "MY_ROLLOUTS_DIR": str(where), "HF_HUB_OFFLINE": "1"}
    env.pop("MY_OUT", None)
    proc = run_script(
        [sys.executable, "recipes/filter_trajectories.py", "--config", str(config)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(rows) == 79  # data/rollouts.jsonl's rows, read from the expanded path
