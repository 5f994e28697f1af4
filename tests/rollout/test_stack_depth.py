"""From `recipes/collect_rollouts.py`'s `main` to a model's HTTP request: how many frames of ours.

A one-episode collection against the scripted world roles served on 127.0.0.1; every request the
HTTP transport sends is counted (`tests/stack_depth.py`: frames in executor_sft/ and
recipes/, across asyncio tasks). The deepest are 8, each with a job of its own:

1. `main`: the recipe (arguments, config, exit status);
2. `collect_in_process`: the engine, a registry entry (holds the rollouts file and the run's
   runtime, writes the summary);
3. `run_episodes`: concurrency, resume, retry bound and the grouped commit (shared with evaluation);
4. `run_episode`: one episode, its labels and counterfactual re-runs;
5. `_run_rounds` (the backbone rounds, shared with replay labelling), `answer_with_substitution`
   (a run's outcome) or `run_counterfactual` (a re-run with a smaller budget);
6. the agent: `BackboneSession.decide`, `run_executor` or `run_answerer`;
7. `call_model`: the recorded call, where the request cache is consulted;
8. the backend's `chat` (its retry loop).

The bound keeps the path from growing.
"""

from __future__ import annotations

from pathlib import Path

from fault_helpers import served_models, write_collect_config
from script_modules import load_script
from stack_depth import count_frames

REPO = Path(__file__).resolve().parents[2]
MAX_FRAMES = 8


def test_the_recipe_reaches_the_http_call_within_the_frame_bound(world_dir, scripted_endpoints, tmp_path):
    base, index = scripted_endpoints
    roles = {r: r for r in ("backbone", "teacher", "student", "answerer")}
    retriever = {"index": str(index), "kind": "bm25", "k": 3}
    path = write_collect_config(
        tmp_path / "collect.yaml", world_dir, served_models(base, roles), retriever, limit=1, concurrency=1
    )
    recipe = load_script("recipes/collect_rollouts.py")
    with count_frames("main", [REPO / "executor_sft", REPO / "recipes"]) as depths:
        assert recipe.main(["--config", str(path)]) == 0
    assert (tmp_path / "out" / "rollouts.jsonl").read_text().count("\n") == 1
    assert len(depths.chains) >= 4  # backbone, teacher, student and answerer requests, at least
    assert any("executor" in frame for chain in depths.chains for frame in chain)
    deepest = depths.deepest
    print(f"deepest: {len(deepest)} frames: {' -> '.join(deepest)}")
    assert len(deepest) <= MAX_FRAMES, " -> ".join(deepest)
