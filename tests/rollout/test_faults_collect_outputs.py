"""Collection outputs: under a file or on a read-only disk, the recipe stops with one line before any
model loads; on a full disk the summary keeps its last whole version (it was left at 0 bytes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from one_line import one_error_line

from executor_sft.episode_runner import RunReport
from executor_sft.errors import OutputError
from executor_sft.retrieval import build_index
from executor_sft.rollout import CollectConfig
from executor_sft.rollout.engine import finish_run
from executor_sft.rollout.summary import CollectionStats
from tests.support.disks import remount, small_tmpfs

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.faults
CORPUS = "".join(f'{{"id": "d{i}", "contents": "passage {i} about topic {i}"}}\n' for i in range(5))
QUESTIONS = '{"id": "q1", "question": "which topic?", "golden_answers": ["topic 1"]}\n'


@pytest.fixture()
def inputs(tmp_path: Path) -> Path:
    (tmp_path / "c.jsonl").write_text(CORPUS, encoding="utf-8")
    (tmp_path / "q.jsonl").write_text(QUESTIONS, encoding="utf-8")
    build_index(tmp_path / "c.jsonl", tmp_path / "idx", bm25=True)
    return tmp_path


def collect_config(inputs: Path, output_dir: Path) -> Path:
    """Offline models that would take a while to load: the checks must come first."""
    path = inputs / "cfg.yaml"
    path.write_text(
        f"""questions: {{path: {inputs / "q.jsonl"}}}
retriever: {{index: {inputs / "idx"}, kind: bm25, k: 3, corpus: {inputs / "c.jsonl"}}}
models:
  backbone: {{backend: transformers, model: "offline:smollm2"}}
  teacher: {{backend: transformers, model: "offline:smollm2"}}
  answerer: {{backend: transformers, model: "offline:smollm2"}}
pipeline: {{executor_roles: [teacher], driver: teacher, max_turns: 2}}
output_dir: {output_dir}
""",
        encoding="utf-8",
    )
    return path


def run_collect(config: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "recipes/collect_rollouts.py"), "--config", str(config)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return run_script(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_an_output_dir_that_is_a_file_is_one_line_before_models_load(inputs: Path) -> None:
    (inputs / "out").write_bytes(b"mine\n")
    line = one_error_line(run_collect(collect_config(inputs, inputs / "out")))
    assert line == f"error: {inputs / 'out'}: output_dir needs a directory here, but it is a file"
    assert (inputs / "out").read_bytes() == b"mine\n"


def test_a_rollouts_path_that_is_a_directory_is_one_line(inputs: Path) -> None:
    (inputs / "out" / "rollouts.jsonl").mkdir(parents=True)
    line = one_error_line(run_collect(collect_config(inputs, inputs / "out")))
    assert line == (
        f"error: {inputs / 'out' / 'rollouts.jsonl'}: is a directory, not a JSONL file: choose another output_dir"
    )


def test_a_read_only_output_dir_is_one_line_before_models_load(inputs: Path) -> None:
    with small_tmpfs(inputs / "disk", "1m") as disk:
        remount(disk, "ro")
        line = one_error_line(run_collect(collect_config(inputs, disk / "out")))
        assert line == f"error: {disk}: output_dir: the file system is read-only: choose another output"


def test_a_full_disk_keeps_the_last_whole_summary(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        config = CollectConfig.model_validate(
            {"questions": {"path": "q.jsonl"}, "retriever": {"index": "unused"}, "output_dir": str(disk)}
        )
        summary = disk / "rollouts.summary.json"
        finish_run(config, CollectionStats(), RunReport(), start=0.0)
        before = summary.read_bytes()
        assert before.startswith(b"{")
        with (disk / "filler").open("wb", buffering=0) as fh, pytest.raises(OSError):
            while True:
                fh.write(b"\0" * 4096)
        with pytest.raises(OutputError, match="the disk is full"):
            finish_run(config, CollectionStats(), RunReport(written=3), start=0.0)
        assert summary.read_bytes() == before
        assert sorted(os.listdir(disk)) == ["filler", "rollouts.summary.json"]
