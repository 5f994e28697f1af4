"""collect_parallel: worker processes produce exactly what one process does, and resume from the merged file."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from executor_sft.retrieval import BM25Retriever, CachedRetriever, load_corpus
from executor_sft.rollout import CollectConfig, collect, collect_parallel
from executor_sft.rollout.parallel import parts_dir
from executor_sft.store import read_episodes
from executor_sft.synthetic import load_world, scripted_models


def world_models(world_dir: str, questions) -> dict:
    """Module-level, so spawned workers can unpickle it as a factory."""
    return scripted_models(load_world(Path(world_dir)))


def world_retriever(world_dir: str) -> CachedRetriever:
    return CachedRetriever(BM25Retriever.build(load_corpus(Path(world_dir) / "corpus.jsonl")))


def _config(world_dir: Path, out: Path, **kwargs) -> CollectConfig:
    data = {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 16},
        "retriever": {"index": "unused-a-retriever-is-passed"},
        "output_dir": str(out),
        "concurrency": 8,
        "samples_per_question": 2,
    }
    data.update(kwargs)
    return CollectConfig.model_validate(data)


def _comparable(record: dict) -> dict:
    """A record without the wall-clock fields (call start times, latencies, research time)."""

    def strip(x):
        if isinstance(x, dict):
            return {
                k: (None if k in ("t_start", "latency_s", "research_s") else strip(v)) for k, v in x.items()
            }
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(record)


@pytest.mark.slow
def test_two_workers_match_one_process_and_resume_from_the_merged_file(world, world_dir, tmp_path):
    one = _config(world_dir, tmp_path / "one")
    reference = asyncio.run(
        collect(
            one, models=scripted_models(world), retriever=world_retriever(str(world_dir)), show_progress=False
        )
    )
    assert reference.written == 32 and not reference.failed

    # Half of the work is already in the merged file (e.g. an earlier single-process run).
    par = _config(world_dir, tmp_path / "par", num_workers=2)
    half = par.model_copy(
        update={"questions": par.questions.model_copy(update={"limit": 8}), "num_workers": 1}
    )
    asyncio.run(
        collect(
            half,
            models=scripted_models(world),
            retriever=world_retriever(str(world_dir)),
            show_progress=False,
        )
    )
    before = par.rollouts_path.read_bytes()

    result = collect_parallel(
        par,
        models_factory=functools.partial(world_models, str(world_dir)),
        retriever_factory=functools.partial(world_retriever, str(world_dir)),
        show_progress=False,
    )
    assert (result.written, result.skipped, result.failed) == (16, 16, [])
    assert par.rollouts_path.read_bytes().startswith(before)  # finished work is never rewritten
    assert not parts_dir(par).exists()  # part files merged and removed
    got = [_comparable(e) for e in read_episodes(par.rollouts_path)]
    want = {e["episode_id"]: _comparable(e) for e in read_episodes(reference.path)}
    assert len(got) == len({e["episode_id"] for e in got}) == 32
    assert {e["episode_id"]: e for e in got} == want  # same records, field order included
    assert all(list(e) == list(want[e["episode_id"]]) for e in got)
    for key in ("episodes", "questions", "roles", "stop_reasons", "episode_errors", "counterfactual_runs"):
        assert result.summary[key] == reference.summary[key], key
    assert result.summary["workers"] == 2 and result.elapsed_s > 0


def test_an_engine_of_other_processes_with_own_objects_asks_for_factories(
    world, world_dir, world_bm25, tmp_path
):
    config = _config(world_dir, tmp_path, num_workers=2)
    with pytest.raises(ValueError, match="picklable models_factory"):
        asyncio.run(collect(config, models=scripted_models(world), retriever=world_bm25, show_progress=False))


def test_separate_mode_with_two_workers_matches_one_process(world, world_dir, tmp_path):
    """Separate mode writes one episode per (question, sample, driving role); the workers'
    split by question must keep every one of them, with the same ids and records."""
    settings = {"collection": {"mode": "separate"}, "samples_per_question": 1}
    one = _config(world_dir, tmp_path / "one", **settings)
    reference = asyncio.run(
        collect(
            one, models=scripted_models(world), retriever=world_retriever(str(world_dir)), show_progress=False
        )
    )
    par = _config(world_dir, tmp_path / "par", num_workers=2, **settings)
    result = collect_parallel(
        par,
        models_factory=functools.partial(world_models, str(world_dir)),
        retriever_factory=functools.partial(world_retriever, str(world_dir)),
        show_progress=False,
    )
    want = {e["episode_id"]: _comparable(e) for e in read_episodes(reference.path)}
    got = {e["episode_id"]: _comparable(e) for e in read_episodes(par.rollouts_path)}
    assert len(want) == reference.written == 32  # 16 questions x 2 driving roles
    assert {i.rsplit("@", 1)[1] for i in want} == {"teacher", "student"}
    assert (result.written, result.failed) == (32, []) and got == want
    assert result.summary["roles"] == reference.summary["roles"] and result.summary["workers"] == 2
