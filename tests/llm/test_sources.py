"""A local model folder that cannot load is refused by the preflight, before anything is written (p04).

Empty, holding only `config.json`, or an SFT output whose run has not finished (our marker and a
checkpoint, no final model): each is one line naming what is missing, exit 2, no output folder.
A folder a training run finished (`tiny_checkpoint`) passes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script

REPO = Path(__file__).resolve().parents[2]
CONFIG = "recipes/configs/collect_minibench_offline.yaml"


def collect(*args: str):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return run_script(
        [sys.executable, "recipes/collect_rollouts.py", "--config", CONFIG, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def unfinished_sft_output(path: Path) -> Path:
    (path / "checkpoint-2").mkdir(parents=True)
    (path / "_executor_sft.json").write_text(json.dumps({"made_by": "executor_sft.sft.train_executor"}))
    (path / "checkpoint-2" / "config.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    "make, missing",
    [
        (
            lambda p: p,
            "holds no config.json, no weights (*.safetensors), no tokenizer (tokenizer.json): give ",
        ),
        (
            lambda p: (p / "config.json").write_text("{}") and p,
            "holds no weights (*.safetensors), no tokenizer",
        ),
        (
            unfinished_sft_output,
            "a training run that has not finished (latest checkpoint-2); let it finish, or give ",
        ),
    ],
    ids=["empty", "config_only", "unfinished_sft"],
)
def test_a_model_folder_that_cannot_load_is_one_line_and_nothing_is_written(
    tmp_path, make, missing, minibench_bm25_dir
):
    folder = tmp_path / "model"
    folder.mkdir()
    make(folder)
    out = tmp_path / "out"
    proc = collect(
        "--set", f"models.student.model={folder}", "--set", f"retriever.index={minibench_bm25_dir}",
        "--output_dir", str(out),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {CONFIG}: models.student.model: {folder}: ") and missing in line, line
    assert not out.exists()


def test_a_finished_model_folder_passes(tiny_checkpoint, minibench_bm25_dir):
    proc = collect(
        "--set", f"models.student.model={tiny_checkpoint}", "--set", f"retriever.index={minibench_bm25_dir}",
        "--preflight_only",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("nothing is missing")
