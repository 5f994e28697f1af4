"""The advice in evaluate's refusal to mix systems is a flag `evaluate.py` takes: the user's
commands, run as they would type them, on the committed sample world with its scripted policies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.recipes import stderr_tail

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "data" / "world"
SCRIPTED = "executor_sft.synthetic.backend:scripted"


def _config(tmp: Path, executor: str) -> Path:
    def policy(name: str) -> dict:
        return {"backend": SCRIPTED, "model": name, "world": str(WORLD)}

    config = {
        "name": "world-scripted",
        "output_dir": str(tmp / "eval"),
        "questions": [{"path": str(WORLD / "questions_test.jsonl"), "limit": 2}],
        "models": {
            "backbone": policy("backbone"),
            "answerer": policy("answerer"),
            "executor": policy(executor),
        },
        "pipeline": {"executor_roles": ["executor"], "driver": "executor", "max_rounds": 3, "max_turns": 3},
        "retriever": {"index": str(tmp / "index"), "kind": "bm25", "k": 3},
        "build_index_from": str(WORLD / "corpus.jsonl"),
    }
    path = tmp / f"eval-{executor}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _evaluate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "recipes/evaluate.py", *args, "--no_progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_flag_evaluates_refusal_names_is_one_evaluate_takes(tmp_path):
    first = _evaluate("--config", str(_config(tmp_path, "teacher")))
    assert first.returncode == 0, stderr_tail(first.stderr)
    other = str(_config(tmp_path, "student"))
    refused = _evaluate("--config", other)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, stderr_tail(refused.stderr)
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "different system" in line and "--accept_system_change" in line
    accepted = _evaluate("--config", other, "--accept_system_change")
    assert accepted.returncode == 0, stderr_tail(accepted.stderr)
    assert "episodes.system.json" in {p.name for p in (tmp_path / "eval").iterdir()}
