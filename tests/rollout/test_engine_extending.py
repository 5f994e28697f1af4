"""A collection engine of a user's own, from one file: named by its import path in the config
(`engine: module:attr`), it receives what `collect` was given and returns the `CollectResult`.
Here it wraps the in-process engine, counting the episodes it is asked for."""

from __future__ import annotations

import asyncio
import sys
import textwrap

from executor_sft.rollout import CollectConfig, collect
from executor_sft.store import read_episodes
from executor_sft.synthetic import scripted_models

ENGINE = textwrap.dedent(
    """
    from executor_sft.rollout.engine import collect_in_process

    CALLS = []

    async def counting(config, **kwargs):
        CALLS.append(len(kwargs["questions"]))
        return await collect_in_process(config, **kwargs)
    """
)


def test_an_engine_from_one_file_runs_the_collection(
    world, world_dir, world_bm25, world_questions, tmp_path, monkeypatch
):
    (tmp_path / "my_engine.py").write_text(ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl")},
            "retriever": {"index": "unused-a-retriever-is-passed"},
            "output_dir": str(tmp_path / "out"),
            "engine": "my_engine:counting",
        }
    )
    questions = world_questions[:3]
    result = asyncio.run(
        collect(
            config,
            models=scripted_models(world),
            retriever=world_bm25,
            questions=questions,
            show_progress=False,
        )
    )
    assert sys.modules["my_engine"].CALLS == [3]
    assert result.written == 3
    assert sorted(e["question"]["id"] for e in read_episodes(config.rollouts_path)) == sorted(
        q.id for q in questions
    )
