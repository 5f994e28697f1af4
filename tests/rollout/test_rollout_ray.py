"""engine: ray on a real two-node local Ray cluster: same episodes and filter output as one process,
per-replica request counts summed over the actors, and a node killed mid-run loses and duplicates
nothing."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from pathlib import Path

import pytest
from fastapi import FastAPI

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.rollout import CollectConfig, collect
from executor_sft.rollout.summary import render_summary
from executor_sft.schema import Episode, Role
from executor_sft.store import read_episodes
from executor_sft.synthetic import scripted_models
from tests.support.recipes import filter_recipe_output

pytest.importorskip("ray")

from tests.support.ray_cluster import BackgroundCollection, world_models, world_retriever  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SCRIPT = {"noise": 0.2, "teacher_extra_search_rate": 0.3}


def _config(world_dir: Path, out: Path, **kwargs) -> CollectConfig:
    data = {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 24},
        "retriever": {"index": "unused-a-retriever-is-passed"},
        "output_dir": str(out),
        "concurrency": 8,
        "samples_per_question": 2,
    }
    data.update(kwargs)
    return CollectConfig.model_validate(data)


def _ids(path: Path) -> list[str]:
    return [r["episode_id"] for r in read_episodes(path)]


def test_ray_engine_matches_in_process_episodes_and_filter_output(ray_cluster, world, world_dir, tmp_path):
    models = functools.partial(world_models, str(world_dir), **SCRIPT)
    retriever = functools.partial(world_retriever, str(world_dir))
    local = _config(world_dir, tmp_path / "local")
    reference = asyncio.run(collect(local, models=models, retriever=retriever, show_progress=False))
    on_ray = _config(world_dir, tmp_path / "ray", engine="ray")
    result = asyncio.run(collect(on_ray, models=models, retriever=retriever, show_progress=False))

    assert reference.written == result.written == 48 and not result.failed
    assert result.summary["actors"] == 2 and len(result.timings["per_node"]) == 2  # both nodes worked
    assert sorted(_ids(on_ray.rollouts_path)) == sorted(_ids(local.rollouts_path))
    assert reference.summary["counterfactual_runs"] > 0
    engine_keys = {"engine", "actors"}
    assert {k: v for k, v in result.summary.items() if k not in engine_keys} == reference.summary
    filtered = filter_recipe_output(local.rollouts_path, tmp_path / "local")
    assert filtered.count(b'\n{"messages"') > 4  # rows of both strata, not an empty file
    assert filter_recipe_output(on_ray.rollouts_path, tmp_path / "ray") == filtered


def test_replica_counts_of_every_actor_reach_the_summary(ray_cluster, world, world_dir, tmp_path):
    """The teacher served by two real HTTP replicas: each actor routes over its own pool, and the
    summary sums them into what one process reports."""
    models = scripted_models(world, **SCRIPT)
    first, second = FastAPI(), FastAPI()
    for role, model in models.items():
        first.mount(f"/{role}", create_app(model, served_name=role))
    second.mount("/teacher", create_app(models[Role.TEACHER], served_name=Role.TEACHER))
    with BackgroundServer(first) as one, BackgroundServer(second) as two:
        urls = {role: [f"{one.base_url.removesuffix('/v1')}/{role}/v1"] for role in models}
        teacher = [*urls[Role.TEACHER], f"{two.base_url.removesuffix('/v1')}/teacher/v1"]
        config = _config(
            world_dir,
            tmp_path / "replicas",
            engine="ray",
            concurrency=4,
            samples_per_question=1,
            questions={"path": str(world_dir / "questions.jsonl"), "limit": 6},
            models={
                role: {
                    "backend": "openai",
                    "model": role,
                    "base_urls": teacher if role == Role.TEACHER else urls[role],
                    "pass_enable_thinking": False,
                }
                for role in (Role.BACKBONE, Role.ANSWERER, Role.TEACHER, Role.STUDENT)
            },
        )
        result = asyncio.run(
            collect(
                config,
                retriever=functools.partial(world_retriever, str(world_dir)),
                show_progress=False,
            )
        )

    assert result.written == 6 and not result.failed and result.summary["actors"] == 2
    replicas = result.summary["replicas"]
    assert list(replicas) == [Role.TEACHER]  # one-URL roles have no pool to report
    assert list(replicas[Role.TEACHER]) == teacher
    counts = replicas[Role.TEACHER].values()
    assert all(c["requests"] > 0 and c["healthy"] and not c["failures"] for c in counts)
    episodes = [Episode.model_validate(e) for e in read_episodes(config.rollouts_path)]
    teacher_calls = sum(
        len(run.calls)
        for episode in episodes
        for run in episode.runs
        if run.role in (Role.TEACHER, Role.TEACHER_BUDGET1)  # the budget-1 re-runs use the teacher model
    )
    assert sum(c["requests"] for c in counts) == teacher_calls > 0
    assert all(url in render_summary(result.summary) for url in teacher)


def test_a_node_killed_mid_run_loses_and_duplicates_nothing(ray_cluster, world_dir, tmp_path):
    config = _config(world_dir, tmp_path / "kill", engine="ray", concurrency=4)
    cluster = ray_cluster
    run = BackgroundCollection(config, str(world_dir), **SCRIPT)
    run.wait_until(lambda: run.written() >= 8)  # both actors are under way
    cluster.kill(cluster.nodes[-1])
    run.thread.join(timeout=240)
    cluster.add_node()  # the cluster has two nodes again for the tests after this one
    assert not run.thread.is_alive()
    result = run.result
    cluster.connect(nodes=2)

    ids = _ids(config.rollouts_path)
    expected = {item.episode_id for item in config.work_items(_questions(config))}
    assert Counter(ids).most_common(1)[0][1] == 1  # nothing written twice
    assert set(ids) == expected and len(expected) == 48  # nothing lost
    assert result.summary["lost_actors"] == 1 and result.summary["requeued"] > 0
    assert not result.failed and not result.not_started


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def _questions(config: CollectConfig):
    from executor_sft.rollout import select_questions

    return select_questions(config)


def test_actors_that_cannot_start_say_why(ray_cluster, world_dir, tmp_path):
    config = _config(world_dir, tmp_path / "bad", engine="ray")
    models = functools.partial(world_models, str(world_dir))
    missing = tmp_path / "no-world-here"  # e.g. a path that does not exist on the nodes
    with pytest.raises(RuntimeError, match=r"no Ray actor could start: .*no-world-here"):
        asyncio.run(
            collect(
                config,
                models=models,
                retriever=functools.partial(world_retriever, str(missing)),
                show_progress=False,
            )
        )
    assert not config.rollouts_path.exists() or not config.rollouts_path.read_bytes()
