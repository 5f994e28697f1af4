"""Collection over a world with wide tasks: `formats: hybrid` alternates deep and wide questions."""

from __future__ import annotations

import asyncio

from executor_sft.data import QuestionSource, select_questions
from executor_sft.retrieval import BM25Retriever, load_corpus
from executor_sft.rollout import CollectConfig, collect
from executor_sft.store import read_episodes
from executor_sft.synthetic import scripted_models, write_world


def test_hybrid_collection_alternates_deep_and_wide_episodes(tmp_path):
    world = write_world(tmp_path / "world", 3, 240, 80, wide_share=0.2)
    questions = str(tmp_path / "world" / "questions.jsonl")
    n_wide = sum(q.type == "wide" for q in world.questions)
    assert 4 <= n_wide < 40
    wide_only = select_questions(QuestionSource(path=questions, formats="table"))
    assert [q.id for q in wide_only] == [q.id for q in world.questions if q.type == "wide"]

    config = CollectConfig.model_validate(
        {
            "questions": {"path": questions, "formats": "hybrid", "limit": 8},
            "retriever": {"index": "unused-a-retriever-is-passed"},
            "output_dir": str(tmp_path / "out"),
            "concurrency": 4,
        }
    )
    bm25 = BM25Retriever.build(load_corpus(tmp_path / "world" / "corpus.jsonl"))
    result = asyncio.run(collect(config, models=scripted_models(world), retriever=bm25, show_progress=False))
    assert result.written == 8 and not result.failed
    episodes = sorted(read_episodes(result.path), key=lambda e: e["episode_id"])
    kinds = [("unique_columns" in e["question"]) for e in episodes]
    assert sorted(kinds) == [False] * 4 + [True] * 4  # 4 deep + 4 wide, as 64 + 64 in WideSeek-R1
    for e in episodes:
        if "unique_columns" in e["question"]:
            assert set(e["metrics"]) >= {"item_f1", "row_f1", "success"}
            assert e["answer"].startswith("| City | Population | Founded |")
            assert all(r["outcome"] is not None for r in e["runs"])
        else:
            assert "item_f1" not in e["metrics"]
