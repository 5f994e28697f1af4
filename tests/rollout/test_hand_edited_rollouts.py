"""A hand-edited rollouts file is one `file:line` error on resume, before any model loads (issue 55, e01).

A real collection writes the file (scripted world roles behind an OpenAI-compatible server on
127.0.0.1); its first line is then edited by hand (`runs: "x"`, `stop_reason: 5`, no
`golden_answers`), and the same command, asked for more questions, is run again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml
from fault_helpers import served_models
from forkserver import run_script

from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]


def collect(config: dict, tmp_path: Path):
    path = tmp_path / "collect.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return run_script(
        [sys.executable, "recipes/collect_rollouts.py", "--config", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_hand_edited_episode_is_its_file_line_on_resume(world_dir, scripted_endpoints, tmp_path):
    base, index = scripted_endpoints
    config = {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 2},
        "retriever": {"index": str(index), "kind": "bm25", "k": 3},
        "models": served_models(base, {r: r for r in ("backbone", "teacher", "student", "answerer")}),
        "output_dir": str(tmp_path / "out"),
        "concurrency": 2,
    }
    done = collect(config, tmp_path)
    assert done.returncode == 0, stderr_tail(done.stderr)
    rollouts = tmp_path / "out" / "rollouts.jsonl"
    first, *rest = rollouts.read_text(encoding="utf-8").splitlines(keepends=True)
    episode = json.loads(first)
    episode.update(runs="x", stop_reason=5)
    del episode["question"]["golden_answers"]
    edited = json.dumps(episode) + "\n" + "".join(rest)
    rollouts.write_text(edited, encoding="utf-8")

    config["questions"]["limit"] = 3
    proc = collect(config, tmp_path)
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr and "loading model" not in proc.stderr
    (line,) = [s for s in proc.stderr.splitlines() if s.startswith("error:")]
    assert line.startswith(f"error: {rollouts}:1: not an episode as collection writes it (field '"), line
    assert all(f"field '{name}" in line for name in ("question.golden_answers", "stop_reason", "runs")), line
    assert line.endswith("; restore or remove the line, or collect into a new output_dir")
    assert rollouts.read_text(encoding="utf-8") == edited
