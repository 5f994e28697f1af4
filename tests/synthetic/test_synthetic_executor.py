"""The scripted teacher through the real executor loop and a real BM25 index over the world.

Its contract: one search when the bare-name query already retrieves the passage the
sub-query means, a second (disambiguated) search when a namesake crowded it out, and with
`max_searches=1` a wrong report on exactly those sub-queries.
"""

from __future__ import annotations

import asyncio

import pytest

from executor_sft.agents import run_executor
from executor_sft.metrics.answer import exact_match
from executor_sft.synthetic import ScriptedTeacherExecutor, parse_subquery, scripted_student_executor


def _hops(world):
    """Unique sub-queries of the world's decompositions (first occurrence)."""
    seen = {}
    for q in world.questions:
        for h in q.decomposition:
            seen.setdefault(h.question, h)
    return list(seen.values())


def _correct(run, hop) -> bool:
    return run.finish == "report" and bool(exact_match(run.report.answer, [hop.answer, *hop.answer_aliases]))


def _naive_hits_gold(world, bm25, hop, k=3) -> bool:
    parsed = parse_subquery(hop.question, world.types_of)
    query = f"{parsed.name} {parsed.relation.keywords}"
    return hop.gold_doc_id in [h.doc_id for h in bm25.search([query], k)[0]]


def _run_all(model, bm25, hops, **kw):
    async def go():
        return await asyncio.gather(*(run_executor(model, bm25, h.question, **kw) for h in hops))

    return asyncio.run(go())


@pytest.fixture(scope="module")
def teacher_runs(world, bm25):
    hops = _hops(world)
    teacher = ScriptedTeacherExecutor(world)
    return hops, _run_all(teacher, bm25, hops, max_turns=3)


@pytest.mark.slow
def test_teacher_searches_once_when_the_first_search_finds_the_entity_and_twice_otherwise(
    world, bm25, teacher_runs
):
    hops, runs = teacher_runs
    for hop, run in zip(hops, runs, strict=True):
        expected = 1 if _naive_hits_gold(world, bm25, hop) else 2
        assert run.n_searches == expected, (hop.question, [s.query for s in run.searches])
        assert _correct(run, hop), (hop.question, hop.answer, run.report)
        assert hop.gold_doc_id in run.searches[-1].doc_ids
        assert run.messages[-1]["content"].startswith("<answer>")
        assert "<evidence>" in run.messages[-1]["content"]
    plain = [r.n_searches for h, r in zip(hops, runs, strict=True) if not h.ambiguous]
    ambiguous = [r.n_searches for h, r in zip(hops, runs, strict=True) if h.ambiguous]
    # By construction namesakes crowd the gold passage out of the top 3 for a bare-name query.
    assert sum(n == 1 for n in plain) / len(plain) >= 0.95
    assert sum(n == 2 for n in ambiguous) / len(ambiguous) >= 0.9
    share_two = sum(r.n_searches == 2 for r in runs) / len(runs)
    assert 0.15 <= share_two <= 0.45, share_two


def test_second_search_adds_the_disambiguating_attribute(world, teacher_runs):
    hops, runs = teacher_runs
    twice = [(h, r) for h, r in zip(hops, runs, strict=True) if r.n_searches == 2]
    assert twice
    for hop, run in twice:
        first, second = (s.query for s in run.searches)
        assert hop.subject in first and hop.descriptor not in first
        assert hop.descriptor and hop.descriptor in second
        call = run.messages[2]["tool_calls"][0]
        assert call["function"]["name"] == "search" and '"query"' in call["function"]["arguments"]


def test_budget_one_rerun_fails_exactly_where_a_second_search_was_needed(world, bm25, teacher_runs):
    hops, runs = teacher_runs
    teacher = ScriptedTeacherExecutor(world)
    budget1 = _run_all(teacher, bm25, hops, max_turns=3, max_searches=1)
    for hop, full, one in zip(hops, runs, budget1, strict=True):
        assert one.n_searches == 1 and one.finish == "report"
        assert _correct(one, hop) == (full.n_searches == 1), hop.question
        if full.n_searches == 2:
            # The best guess is the namesake the first search found, quoted from its passage.
            namesakes = [e for e in world.named(hop.subject) if e.id != hop.gold_doc_id]
            assert one.report.answer in {world.value(e, hop.relation) for e in namesakes}
            assert any(m.get("role") == "user" and "searches" in m["content"] for m in one.messages)


def test_tag_protocol_behaves_like_the_native_one(world, bm25, teacher_runs):
    hops, runs = teacher_runs
    picked = [h for h in hops if h.ambiguous][:3] + [h for h in hops if not h.ambiguous][:3]
    native = {h.question: r for h, r in zip(hops, runs, strict=True)}
    teacher = ScriptedTeacherExecutor(world)
    tagged = _run_all(teacher, bm25, picked, max_turns=3, protocol="tag")
    for hop, run in zip(picked, tagged, strict=True):
        assert run.n_searches == native[hop.question].n_searches
        assert [s.query for s in run.searches] == [s.query for s in native[hop.question].searches]
        assert run.report.answer == native[hop.question].report.answer
        assert "<search>" in run.messages[2]["content"] and "tool_calls" not in run.messages[2]
    one = _run_all(teacher, bm25, picked, max_turns=3, max_searches=1, protocol="tag")
    for hop, run in zip(picked, one, strict=True):
        assert _correct(run, hop) == (native[hop.question].n_searches == 1)


def test_student_variant_never_reformulates(world, bm25, teacher_runs):
    hops, runs = teacher_runs
    student = scripted_student_executor(world)
    student_runs = _run_all(student, bm25, hops, max_turns=3)
    for hop, teacher_run, run in zip(hops, runs, student_runs, strict=True):
        assert run.n_searches == 1
        assert _correct(run, hop) == (teacher_run.n_searches == 1)


def test_noise_and_extra_searches_are_reproducible(world, bm25):
    hops = [h for h in _hops(world) if not h.ambiguous][:20]
    wrong = ScriptedTeacherExecutor(world, noise=1.0)
    for hop, run in zip(hops, _run_all(wrong, bm25, hops, max_turns=3), strict=True):
        assert run.finish == "report" and run.n_searches == 1 and not _correct(run, hop)
    half = ScriptedTeacherExecutor(world, noise=0.5, seed=3)
    a = [r.report.answer for r in _run_all(half, bm25, hops, max_turns=3)]
    b = [r.report.answer for r in _run_all(half, bm25, hops, max_turns=3)]
    assert a == b and 0 < sum(not _correct_answer(x, h) for x, h in zip(a, hops, strict=True)) < len(hops)
    careful = ScriptedTeacherExecutor(world, extra_search_rate=1.0)
    for hop, run in zip(hops, _run_all(careful, bm25, hops, max_turns=3), strict=True):
        assert run.n_searches == 2 and _correct(run, hop)


def _correct_answer(answer, hop) -> bool:
    return bool(exact_match(answer, [hop.answer, *hop.answer_aliases]))


def test_unparseable_sub_query_and_zero_budget_still_end_in_a_report(world, bm25):
    teacher = ScriptedTeacherExecutor(world)
    (odd,) = _run_all(teacher, bm25, [type("H", (), {"question": "Tell me something nice."})()], max_turns=3)
    assert odd.finish == "report" and odd.n_searches == 1 and odd.report.answer == "unknown"
    hop = _hops(world)[0]
    (blind,) = _run_all(teacher, bm25, [hop], max_turns=1)
    assert blind.finish == "report" and blind.n_searches == 0 and blind.report.answer == "unknown"
