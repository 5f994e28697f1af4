"""The evaluation set is built once by a reference run; later cells, single-agent included, score exactly it."""

from __future__ import annotations

import json
import logging

import pytest
from eval_helpers import picky, scripted, scripted_factory

from executor_sft.eval import (
    EvalConfig,
    QuestionSource,
    build_eval_set,
    read_ids,
    run_eval,
    run_sweep,
    select_questions,
)
from executor_sft.eval.eval_set import EvalSetConfig, decide
from executor_sft.eval.sweep import SweepConfig
from executor_sft.llm import ModelPool
from executor_sft.schema import Episode, Question

SOURCE = {"split": "dev", "limit": 3}


def _base(questions_path, index_dir, ids_file=None) -> dict:
    return {
        "questions": [{"path": str(questions_path), **SOURCE, "ids_file": ids_file}],
        "samples": 1,
        "concurrency": 3,
        "models": {"answerer": scripted("answerer"), "judge": scripted("judge")},
        "pipeline": {"executor_roles": ["executor"], "driver": "executor", "max_turns": 3},
        "single_agent": {"max_turns": 3},
        "retriever": {"index": str(index_dir), "k": 3},
    }


@pytest.mark.shared_data
@pytest.mark.slow
def test_eval_set_then_two_cells_share_one_id_list(
    tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25
):
    questions = select_questions([QuestionSource(path=str(minibench_questions_path), **SOURCE)])
    gold = {q.question: q.golden_answers[0] for q in questions}
    expected_out = [q.id for q in questions if picky(q.question)]
    assert 0 < len(expected_out) < len(questions)  # the scripted backbone skips some, not all
    pool = ModelPool(scripted_factory(gold, []))

    config = EvalSetConfig(
        name="scripted-set",
        output_dir=str(tmp_path / "eval_set"),
        base=_base(minibench_questions_path, minibench_bm25_dir, ids_file="ignored-by-the-reference.json"),
        models={"backbone": scripted("bb-picky"), "executor": scripted("ex-quick")},
    )
    built = build_eval_set(config, pool=pool, retriever=minibench_bm25, progress=False)
    assert built.excluded == expected_out
    assert built.ids == [q.id for q in questions if not picky(q.question)]
    path = tmp_path / "eval_set" / "eval_set.json"
    assert read_ids(path) == built.ids
    saved = json.loads(path.read_text())
    assert sum(c["excluded"] for c in saved["counts"].values()) == len(expected_out)
    assert sum(c["total"] for c in saved["counts"].values()) == len(questions)
    assert "| **total** | 9 |" in (tmp_path / "eval_set" / "eval_set.md").read_text()

    sweep = SweepConfig.model_validate(
        {
            "name": "two-cells",
            "output_dir": str(tmp_path / "sweep"),
            "base": _base(minibench_questions_path, minibench_bm25_dir, ids_file=str(path)),
            "backbones": {"wide": scripted("bb-wide")},
            "executors": {"thorough": scripted("ex-thorough")},
            "single_agents": {"agent": scripted("agent")},
        }
    )
    result = run_sweep(sweep, pool=pool, retriever=minibench_bm25, progress=False)
    id_lists = []
    for cell, res in result.cells:
        lines = (
            (tmp_path / "sweep" / "cells" / cell.config.out.name / "episodes.jsonl").read_text().splitlines()
        )
        id_lists.append(sorted(json.loads(line)["question"]["id"] for line in lines))
        assert res.meta["questions"] == len(built.ids) and res.meta["eval_set"] == str(path)
    assert [c.kind for c, _ in result.cells] == ["pipeline", "single_agent"]
    assert id_lists[0] == id_lists[1] == sorted(built.ids)
    assert result.cells[0][1].meta["question_ids"] == result.cells[1][1].meta["question_ids"]


def test_decide_keeps_questions_whose_reference_episode_errored():
    qs = [Question(id=i, question="?", golden_answers=["x"], dataset="d") for i in ("a", "b")]
    eps = [
        Episode(episode_id="a#0", question=qs[0]),
        Episode(episode_id="b#0", question=qs[1], stop_reason="error"),
    ]
    result = decide(qs, eps)
    assert (result.ids, result.excluded) == (["b"], ["a"])
    assert result.counts["d"] == {"total": 2, "excluded": 1, "evaluated": 1, "kept_after_error": 1}
    with pytest.raises(ValueError, match="no reference episode"):
        decide(qs, eps[:1])


def test_ids_file_must_match_the_question_source(tmp_path):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"id": i, "question": "?", "answer": "a"}) + "\n" for i in "abc"))
    (tmp_path / "ids.txt").write_text("c\na\n")
    picked = select_questions([QuestionSource(path=str(qfile), ids_file=str(tmp_path / "ids.txt"))])
    assert [q.id for q in picked] == ["a", "c"]
    (tmp_path / "bad.txt").write_text("a\nzz\n")
    with pytest.raises(ValueError, match=r"bad.txt: 1 id\(s\) not in"):
        select_questions([QuestionSource(path=str(qfile), ids_file=str(tmp_path / "bad.txt"))])
    with pytest.raises(FileNotFoundError, match="build_eval_set.py"):
        select_questions([QuestionSource(path=str(qfile), ids_file=str(tmp_path / "none.json"))])


def _cfg(tmp_path, temperature: float, samples: int) -> EvalConfig:
    m = {"backend": "openai", "model": "m", "temperature": temperature}
    return EvalConfig.model_validate(
        {
            "output_dir": str(tmp_path / "out"),
            "questions": [{"path": "q.jsonl"}],
            "samples": samples,
            "models": {"backbone": m, "answerer": m, "executor": m},
            "retriever": {"index": "i"},
        }
    )


def test_identical_samples_are_detected(tmp_path):
    assert _cfg(tmp_path, 0.0, 4).identical_samples()
    assert not _cfg(tmp_path, 0.7, 4).identical_samples()
    assert not _cfg(tmp_path, 0.0, 1).identical_samples()
    data = _cfg(tmp_path, 0.0, 4).model_dump()
    data["pipeline"]["roles"] = {"executor": {"sampling": {"temperature": 0.6}}}
    cfg = EvalConfig.model_validate(data)
    assert not cfg.identical_samples()


@pytest.mark.shared_data
def test_greedy_samples_warn(tmp_path, caplog, minibench_questions_path, minibench_bm25):
    cfg = _cfg(tmp_path, 0.0, 2)
    cfg.questions = [
        QuestionSource(path=str(minibench_questions_path), split="dev", datasets=["musique"], limit=1)
    ]
    gold = {}
    models = {
        r: scripted_factory(gold, [])(m.model_copy(update={"model": f"scripted:{p}"}))
        for (r, m), p in zip(cfg.models.items(), ("bb-narrow", "answerer", "ex-quick"), strict=True)
    }
    with caplog.at_level(logging.WARNING):
        run = run_eval(cfg, models=models, retriever=minibench_bm25, progress=False)
    assert "samples are identical" in caplog.text and run.results.meta["identical_samples"] is True
