"""From `recipes/collect_rollouts.py`'s `main` to a model's HTTP request: how many frames of ours.

A one-episode collection against the scripted world roles served on 127.0.0.1; every request the
HTTP transport sends is counted (`tests/stack_depth.py`: frames in executor_sft/ and
recipes/, across asyncio tasks). The deepest are 10: main, the engine (`collect_in_process`), the
episode runner, the work item (`run_one`: episode and counterfactual re-runs), then the episode's
backbone rounds (`run_episode`, `_run_rounds`, shared with replay labelling) or a counterfactual
re-run, the agent (`run_executor`, `BackboneSession.decide`), the recorded call (`call_model`),
the request cache (a wrapper any backend can sit under) and the backend's retry loop. The bound
keeps the path from growing.
"""

from __future__ import annotations

from pathlib import Path

from fault_helpers import served_models, write_collect_config
from script_modules import load_script
from stack_depth import count_frames

REPO = Path(__file__).resolve().parents[2]
MAX_FRAMES = 10


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
