"""A resumed evaluation answers its greedy requests from the request cache in its output directory:
`recipes/evaluate.py` run as a user runs it, on the committed sample world with its scripted roles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.recipes import stderr_tail

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "data" / "world"
MARK = "from the cache"


def _config(tmp: Path) -> Path:
    def role(name: str) -> dict:
        return {"backend": "executor_sft.synthetic.backend:scripted", "model": name, "world": str(WORLD)}

    config = {
        "name": "world-scripted",
        "output_dir": str(tmp / "eval"),
        "questions": [{"path": str(WORLD / "questions_test.jsonl"), "limit": 3}],
        "models": {"backbone": role("backbone"), "answerer": role("answerer"), "executor": role("teacher")},
        "pipeline": {"executor_roles": ["executor"], "driver": "executor", "max_rounds": 3, "max_turns": 3},
        "retriever": {"index": str(tmp / "index"), "kind": "bm25", "k": 3},
        "build_index_from": str(WORLD / "corpus.jsonl"),
    }
    path = tmp / "eval.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _evaluate(config: Path, *extra: str) -> None:
    done = subprocess.run(
        [sys.executable, "recipes/evaluate.py", "--config", str(config), "--no_progress", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, stderr_tail(done.stderr)


def _answers(out: Path) -> dict[str, str]:
    lines = (out / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    return {e["episode_id"]: e["answer"] for e in map(json.loads, lines)}


def _resume_with_marked_cache(out: Path) -> tuple[str, int]:
    """Every cached answerer reply now says MARK; the first episode stays stored, the others are
    dropped as a kill would drop them. Returns the kept episode's line and the cache's line count."""
    cache = out / "llm_cache.jsonl"
    entries = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]
    for entry in entries:
        if '"model":"answerer"' in entry["model_key"]:
            entry["result"]["message"]["content"] = f"<answer>{MARK}</answer>"
    cache.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    kept = (out / "episodes.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[0]
    (out / "episodes.jsonl").write_text(kept, encoding="utf-8")
    (out / "results.json").unlink()
    return kept, len(entries)


def test_a_resumed_evaluation_replays_its_cached_requests(tmp_path):
    config = _config(tmp_path)
    out = tmp_path / "eval"
    _evaluate(config)
    first = _answers(out)
    assert len(first) == 3 and MARK not in first.values()
    kept, cached = _resume_with_marked_cache(out)

    _evaluate(config)
    resumed = _answers(out)
    kept_id = json.loads(kept)["episode_id"]
    assert resumed[kept_id] == first[kept_id]
    assert {resumed[i] for i in resumed if i != kept_id} == {MARK}  # answered from the cache, not the role
    assert len((out / "llm_cache.jsonl").read_text(encoding="utf-8").splitlines()) == cached  # no miss


def test_without_the_cache_the_resumed_episodes_ask_the_roles_again(tmp_path):
    """The control for the test above: the same resume with `llm_cache=false` gets the roles' answers."""
    config = _config(tmp_path)
    out = tmp_path / "eval"
    _evaluate(config)
    first = _answers(out)
    _resume_with_marked_cache(out)
    _evaluate(config, "--set", "llm_cache=false")
    assert _answers(out) == first
