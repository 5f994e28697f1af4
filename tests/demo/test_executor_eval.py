"""Executor-level evaluation through the real `run_executor` and a real bm25s index of a small world."""

from __future__ import annotations

import json

import pytest

from executor_sft.eval.executor_eval import (
    ExecutorEvalResult,
    evaluate_executor,
    load_subqueries,
    markdown_table,
    markdown_table_by_type,
)
from executor_sft.retrieval import BM25Retriever, load_corpus
from executor_sft.synthetic import ScriptedTeacherExecutor, scripted_student_executor, write_world
from tests.support.doubles import ScriptedChatModel, assistant, tool_call


@pytest.fixture(scope="module")
def small_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_world")
    world = write_world(out, 3, 200, 60)
    return world, out, BM25Retriever.build(load_corpus(out / "corpus.jsonl"))


@pytest.fixture(scope="module")
def sub_queries(small_world):
    return load_subqueries(small_world[1] / "subqueries_test.jsonl")


async def test_teacher_is_right_and_searches_twice_exactly_on_ambiguous_names(
    small_world, sub_queries, tmp_path
):
    world, _, bm25 = small_world
    runs = tmp_path / "runs.jsonl"
    res = await evaluate_executor(
        ScriptedTeacherExecutor(world), bm25, sub_queries, runs_path=runs, show_progress=False
    )
    assert res.n == len(sub_queries) and res.format_valid == 1.0 and res.em == 1.0 and res.f1 == 1.0
    assert res.gold_recall == 1.0
    assert res.share_1_search + res.share_2plus_searches == pytest.approx(1.0)
    assert 1.0 < res.searches_mean < 2.0  # some sub-queries need the second, disambiguating search
    assert res.tokens_per_subquery > 0
    lines = [json.loads(line) for line in runs.open()]
    assert len(lines) == res.n and {"score", "run"} <= set(lines[0])
    twice = {line["score"]["id"] for line in lines if line["score"]["n_searches"] >= 2}
    assert twice and all(
        sq.model_extra["type"] == "single_hop_ambiguous" for sq in sub_queries if sq.id in twice
    )


async def test_every_metric_is_reported_per_sub_query_type(small_world, sub_queries):
    world, _, bm25 = small_world
    res = await evaluate_executor(ScriptedTeacherExecutor(world), bm25, sub_queries, show_progress=False)
    types = {sq.model_extra["type"] for sq in sub_queries}
    assert set(res.by_type) == types == {"single_hop", "single_hop_ambiguous"}
    single, ambiguous = res.by_type["single_hop"], res.by_type["single_hop_ambiguous"]
    assert single.n + ambiguous.n == res.n and all(i.type == "single_hop" for i in single.items)
    # The teacher searches twice exactly on ambiguous names (plus its over-search on some plain ones).
    assert ambiguous.share_2plus_searches == 1.0 and ambiguous.searches_mean == 2.0
    assert single.share_2plus_searches < 1.0 and single.searches_mean < 2.0
    for sub in (single, ambiguous):
        assert sub.em == sub.f1 == sub.format_valid == 1.0 and sub.tokens_per_subquery > 0
    # Per-type figures average back to the overall ones, weighted by n.
    for key in ("em", "f1", "format_valid", "searches_mean", "share_2plus_searches", "tokens_per_subquery"):
        weighted = sum(getattr(r, key) * r.n for r in res.by_type.values()) / res.n
        assert weighted == pytest.approx(getattr(res, key))
    d = res.to_dict()
    assert {"em", "share_2plus_searches", "seconds"} <= set(d) and "items" not in d
    assert set(d["by_type"]) == types and "seconds" not in d["by_type"]["single_hop"]
    assert d["by_type"]["single_hop_ambiguous"]["n"] == ambiguous.n
    table = markdown_table_by_type([res], ["teacher"]).splitlines()
    assert table[0].startswith("| model | sub-query type | n |") and len(table) == 4
    assert table[3].startswith(
        f"| teacher | single_hop_ambiguous | {ambiguous.n} | 100.0% | 100.0% | 1.000 | 2.00 |"
    )


async def test_student_without_reformulation_is_worse_and_never_searches_twice(small_world, sub_queries):
    world, _, bm25 = small_world
    teacher = await evaluate_executor(ScriptedTeacherExecutor(world), bm25, sub_queries, show_progress=False)
    student = await evaluate_executor(
        scripted_student_executor(world), bm25, sub_queries, show_progress=False
    )
    assert student.share_2plus_searches == 0.0 and student.share_1_search == 1.0
    assert student.format_valid == 1.0 and student.em < teacher.em


async def test_malformed_and_unreported_runs_score_zero(small_world, sub_queries):
    _, _, bm25 = small_world
    q = sub_queries[:2]
    chatter = ScriptedChatModel(default="I think it is probably somewhere.")
    res = await evaluate_executor(chatter, bm25, q, show_progress=False)
    assert res.format_valid == 0.0 and res.em == 0.0 and res.searches_mean == 0.0
    assert [i.finish for i in res.items] == ["invalid", "invalid"] and all(
        i.answer is None for i in res.items
    )
    gold = q[0].golden_answers[0]
    right = ScriptedChatModel(
        [assistant(tool_calls=[tool_call("search", {"query": q[0].question})]), f"<answer>{gold}</answer>"]
    )
    one = await evaluate_executor(right, bm25, q[:1], show_progress=False)
    assert one.format_valid == 1.0 and one.em == 1.0 and one.share_1_search == 1.0


def test_markdown_table_has_a_row_per_result():
    res = ExecutorEvalResult("m", 4, 0.5, 0.25, 0.3, 1.25, 0.0, 0.75, 0.25, 812.0, None, 1.0)
    table = markdown_table([res, res], ["before", "after"])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith(
        "| before | 4 | 50.0% | 25.0% | 0.300 | 1.25 | 75.0% | 25.0% | 812 | - |"
    )
    assert "items" not in res.to_dict() and res.to_dict(with_items=True)["items"] == []
    assert res.by_type == {} and res.to_dict()["by_type"] == {}  # no sub-query had a type
    with pytest.raises(ValueError, match="no sub-queries"):
        from executor_sft.eval.executor_eval import aggregate

        aggregate("m", [])
