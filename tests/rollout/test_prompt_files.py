"""A `file:` prompt edited in place between a run and its resume is a changed system (issue 55).

The config names only the prompt file's path, so the run records its content's hash: a resume
after an edit is refused as any other system change is (collect: the executor prompt; evaluate:
the judge prompt), and the output keeps only the first version's episodes. The same content
again (the edit undone) is the same system. Every role is a scripted synthetic-world policy
behind an OpenAI-compatible server on 127.0.0.1; the recipes run as subprocesses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml
from fault_helpers import served_models
from forkserver import run_script

from executor_sft.agents.prompting import packaged_prompt
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]


def run(recipe: str, config: dict, tmp_path: Path, name: str):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return run_script(
        [sys.executable, f"recipes/{recipe}", "--config", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def refused_for(proc, stored: Path, prompt: str, old: str, new: str) -> None:
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr
    (line,) = [s for s in proc.stderr.splitlines() if s.startswith("error:")]
    assert line.startswith(
        f'error: {stored}: holds episodes of a different system (changed: prompt_files.{prompt}: "{old[:36]}...'
    ), line
    assert f' -> "{new[:36]}...' in line


def digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def prompt_file(tmp_path: Path, name: str, extra: str = "") -> Path:
    """The packaged prompt `name` as a file (`extra` appended: an edit in place)."""
    path = tmp_path / f"{name}.md"
    path.write_text(packaged_prompt(name) + "\n" + extra, encoding="utf-8")
    return path


def edit_between_run_and_resume(recipe: str, config: dict, tmp_path: Path, name: str, stored: Path) -> bytes:
    """Run `recipe` on `config`, edit prompt file `name` in place, ask for one more question and
    run it again: refused, `stored` untouched. Returns what the first run stored."""
    first = digest(tmp_path / f"{name}.md")
    done = run(recipe, config, tmp_path, "config.yaml")
    assert done.returncode == 0, stderr_tail(done.stderr)
    before = stored.read_bytes()
    prompt_file(tmp_path, name, "Answer in one word.\n")
    questions = config["questions"] if isinstance(config["questions"], dict) else config["questions"][0]
    questions["limit"] = 3  # a resume that would add episodes
    refused = run(recipe, config, tmp_path, "config.yaml")
    refused_for(refused, stored, name, first, digest(tmp_path / f"{name}.md"))
    assert stored.read_bytes() == before
    return before


def retrieval(index: Path) -> dict:
    return {"index": str(index), "kind": "bm25", "k": 3}


def test_collect_refuses_a_resume_after_its_executor_prompt_file_changed(
    world_dir, scripted_endpoints, tmp_path
):
    base, index = scripted_endpoints
    first = digest(prompt := prompt_file(tmp_path, "executor_native"))
    config = {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 2},
        "retriever": retrieval(index),
        "models": served_models(base, {r: r for r in ("backbone", "teacher", "student", "answerer")}),
        "pipeline": {"prompts": {"executor_native": f"file:{prompt}"}},
        "output_dir": str(tmp_path / "out"),
        "concurrency": 2,
    }
    rollouts = tmp_path / "out" / "rollouts.jsonl"
    before = edit_between_run_and_resume("collect_rollouts.py", config, tmp_path, "executor_native", rollouts)
    system = json.loads((tmp_path / "out" / "rollouts.system.json").read_text())
    assert system["system"]["prompt_files"] == {"executor_native": first}

    prompt_file(tmp_path, "executor_native")  # the edit undone
    resumed = run("collect_rollouts.py", config, tmp_path, "config.yaml")
    assert resumed.returncode == 0, stderr_tail(resumed.stderr)
    assert rollouts.read_bytes().startswith(before) and len(rollouts.read_bytes()) > len(before)


def test_evaluate_refuses_a_resume_after_its_judge_prompt_file_changed(
    world_dir, scripted_endpoints, tmp_path
):
    base, index = scripted_endpoints
    first = digest(prompt := prompt_file(tmp_path, "judge"))
    config = {
        "name": "prompt-files",
        "questions": [{"path": str(world_dir / "questions.jsonl"), "limit": 2, "limit_per": "source"}],
        "retriever": retrieval(index),
        "models": served_models(
            base, {"backbone": "backbone", "executor": "teacher", "answerer": "answerer", "judge": "judge"}
        ),
        "pipeline": {
            "executor_roles": ["executor"],
            "driver": "executor",
            "prompts": {"judge": f"file:{prompt}"},
        },
        "output_dir": str(tmp_path / "eval"),
        "concurrency": 2,
    }
    episodes = tmp_path / "eval" / "episodes.jsonl"
    edit_between_run_and_resume("evaluate.py", config, tmp_path, "judge", episodes)
    system = json.loads((tmp_path / "eval" / "episodes.system.json").read_text())
    assert system["system"]["prompt_files"] == {"judge": first}
