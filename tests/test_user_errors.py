"""Recipes tell a user's mistake from a bug: a `UserError` is one line and exit 2, a bug keeps its traceback.

Each recipe runs as a subprocess with the function doing its work replaced by one that raises,
so the check is the recipe's own `main` and `__main__` block, not a copy of its error handling.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from forkserver import run_script
from slow import launches

from executor_sft.data.idlist import read_ids
from executor_sft.data.questions import QuestionFormatError
from executor_sft.errors import (
    ConfigError,
    InputError,
    MalformedLineError,
    MissingFileError,
    RowError,
    UserError,
)
from executor_sft.files import iter_records
from executor_sft.filters.records import RecordError
from executor_sft.retrieval.build import IndexBuildError
from executor_sft.retrieval.corpus import CorpusFormatError
from executor_sft.retrieval.encoders import EncoderLoadError
from executor_sft.retrieval.manifest import IndexMismatchError

ROOT = Path(__file__).resolve().parents[1]
RAISED_FOR_BAD_INPUT = (
    CorpusFormatError,
    EncoderLoadError,
    IndexBuildError,
    IndexMismatchError,
    QuestionFormatError,
    RecordError,
)

RAISE_IN_RECIPE = """
import importlib, runpy, sys
from executor_sft.errors import ConfigError

module, attr, kind, recipe, *argv = sys.argv[1:]

def replacement(*args, **kwargs):
    if kind == "bug":  # a ValueError, as most bugs are, and as the recipes once caught
        raise ValueError("a bug deep inside the run")
    raise ConfigError("cfg.yaml:3: a value the user can fix")

setattr(importlib.import_module(module), attr, replacement)
sys.argv = [recipe, *argv]
runpy.run_path(recipe, run_name="__main__")
"""

WORLD = ROOT / "data" / "world"


def on_the_sample_world(config: str, tmp: Path, **replace: object) -> str:
    """A shipped config with its shared-data paths moved to the committed sample world, so these
    tests need no `../shared` (a public clone has none) and still start the recipe as shipped."""
    data = yaml.safe_load((ROOT / config).read_text(encoding="utf-8"))
    data.update(replace)
    for source in (
        data.get("questions", []) if isinstance(data.get("questions"), list) else [data.get("questions")]
    ):
        if isinstance(source, dict):
            source.update(path=str(WORLD / "questions.jsonl"))
            source.pop("datasets", None)
            source.pop("split", None)
    backbone = data.get("models", {}).get("backbone", {})
    if backbone.get("backend") == "oracle":
        backbone["questions"] = str(WORLD / "questions.jsonl")
    if "build_index_from" in data:
        data["build_index_from"] = str(WORLD / "corpus.jsonl")
    if isinstance(data.get("retriever"), dict):
        data["retriever"]["index"] = str(tmp / "index")
        if "corpus" in data["retriever"]:
            data["retriever"]["corpus"] = str(WORLD / "corpus.jsonl")
    out = tmp / Path(config).name
    out.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(out)


RECIPES = {
    "evaluate": (
        "executor_sft.eval:run_eval",
        lambda t: [
            "--config",
            on_the_sample_world("recipes/configs/eval_minibench_smollm2.yaml", t),
            "--output_dir",
            str(t),
        ],
    ),
    "sweep": (
        "executor_sft.eval.sweep:run_sweep",
        lambda t: [
            "--config",
            on_the_sample_world(
                "recipes/configs/sweep_minibench.yaml",
                t,
                base=on_the_sample_world("recipes/configs/eval_minibench_smollm2.yaml", t),
            ),
            "--output_dir",
            str(t),
        ],
    ),
    "build_eval_set": (
        "executor_sft.eval.eval_set:build_eval_set",
        lambda t: ["--config", "recipes/configs/paper/eval_set.yaml", "--output_dir", str(t)],
    ),
    "collect_rollouts": (
        "executor_sft.preflight:check_config",
        lambda t: [
            "--config",
            on_the_sample_world("recipes/configs/collect_minibench_offline.yaml", t),
            "--output_dir",
            str(t),
        ],
    ),
    "build_grpo_data": (
        "executor_sft.grpo.data:grpo_examples_from_rollouts",
        lambda t: ["--rollouts", "data/rollouts.jsonl", "--output", str(t / "grpo.jsonl")],
    ),
    "sft_executor": ("executor_sft.sft.train:train_executor", lambda t: ["--output_dir", str(t / "model")]),
    "filter_ablation": (
        "executor_sft.eval.ablation:run_ablation",
        lambda t: ["--config", "recipes/configs/filter_ablation.yaml", "--output_dir", str(t)],
    ),
    "demo": ("executor_sft.demos.demo:run_demo", lambda t: ["--out", str(t)]),
    "make_sample_data": ("executor_sft.demos.sample_data:make_sample_data", lambda t: ["--out", str(t)]),
}


def run_raising(recipe: str, kind: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    target, args = RECIPES[recipe]
    module, attr = target.split(":")
    return subprocess.run(
        [sys.executable, "-c", RAISE_IN_RECIPE, module, attr, kind, f"recipes/{recipe}.py", *args(tmp)],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("recipe", [launches(r, r, id=r) for r in sorted(RECIPES)])
def test_a_bug_keeps_its_traceback(recipe: str, tmp_path: Path) -> None:
    proc = run_raising(recipe, "bug", tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.rstrip().endswith("ValueError: a bug deep inside the run")


@pytest.mark.parametrize("recipe", [launches(r, r, id=r) for r in sorted(RECIPES)])
def test_a_user_error_is_one_line_and_exit_2(recipe: str, tmp_path: Path) -> None:
    proc = run_raising(recipe, "user", tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == "error: cfg.yaml:3: a value the user can fix"
    assert "Traceback" not in proc.stderr


def test_a_bad_set_override_is_one_line(tmp_path: Path) -> None:
    proc = run_script(
        [
            sys.executable,
            "recipes/evaluate.py",
            "--config",
            "recipes/configs/eval_minibench_smollm2.yaml",
            "--set",
            "samples",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "error: --set 'samples': expected KEY=VALUE, e.g. samples=4\n"


def test_user_input_errors_share_the_base_and_keep_their_builtin_base(tmp_path: Path) -> None:
    from executor_sft.configfile import read_yaml

    with pytest.raises(ConfigError, match="config file not found"):
        read_yaml(tmp_path / "none.yaml")
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n[1]\n', encoding="utf-8")
    with pytest.raises(MalformedLineError, match=r"bad.jsonl:2: expected a JSON object") as caught:
        list(iter_records(tmp_path / "bad.jsonl"))
    assert isinstance(caught.value, UserError) and isinstance(caught.value, ValueError)
    with pytest.raises(MissingFileError) as missing:
        read_ids(tmp_path / "none.json")
    assert isinstance(missing.value, UserError) and isinstance(missing.value, FileNotFoundError)
    for cls in (InputError, RowError, ConfigError, *RAISED_FOR_BAD_INPUT):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError), cls
