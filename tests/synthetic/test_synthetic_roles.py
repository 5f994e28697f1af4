"""Scripted backbone, answerer and judge: unit behaviour, then whole episodes through the real runtime."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from executor_sft.agents import PipelineConfig, run_counterfactual, run_episode
from executor_sft.agents.answerer import answerer_messages
from executor_sft.data import load_questions
from executor_sft.filters import FilterConfig, filter_episodes
from executor_sft.metrics.judge import LLMJudge
from executor_sft.schema import Report
from executor_sft.synthetic import ScriptedAnswerer, ScriptedBackbone, ScriptedJudge, scripted_models


def _feedback(pairs):
    body = "\n\n".join(
        f"[{i}] Sub-query: {q}\nReport: <answer>{a}</answer>" for i, (q, a) in enumerate(pairs, 1)
    )
    return {"role": "user", "content": f"Reports from round 1:\n\n{body}\n\nDispatch or stop."}


def _first(world, kind, n_hops=None):
    return next(
        q for q in world.questions if q.type == kind and (n_hops is None or len(q.decomposition) == n_hops)
    )


def test_backbone_plays_a_bridge_hop_by_hop_with_the_reported_entity(world):
    backbone = ScriptedBackbone(world)
    q = _first(world, "bridge", 3)
    h0, h1, h2 = q.decomposition
    msgs = [{"role": "system", "content": "plan"}, {"role": "user", "content": f"Question: {q.question}"}]
    first = backbone.reply(msgs)
    assert first == f"<subquery>{h0.question}</subquery>"
    msgs += [{"role": "assistant", "content": first}, _feedback([(h0.question, h0.answer)])]
    second = backbone.reply(msgs)
    assert second == f"<subquery>{h1.question}</subquery>"
    msgs += [{"role": "assistant", "content": second}, _feedback([(h1.question, "Nowhereville")])]
    third = backbone.reply(msgs)  # a wrong report propagates into the next sub-query
    assert "Nowhereville" in third and h2.question not in third
    msgs += [{"role": "assistant", "content": third}, _feedback([("x", "y")])]
    assert backbone.reply(msgs) == "<stop/>"


def test_backbone_dispatches_comparisons_in_parallel_and_stops_on_missing_reports(world):
    backbone = ScriptedBackbone(world)
    q = _first(world, "comparison")
    msgs = [{"role": "user", "content": f"Question: {q.question}"}]
    reply = backbone.reply(msgs)
    assert reply.count("<subquery>") == 2
    assert all(h.question in reply for h in q.decomposition)
    msgs += [
        {"role": "assistant", "content": reply},
        _feedback([(h.question, h.answer) for h in q.decomposition]),
    ]
    assert backbone.reply(msgs) == "<stop/>"
    bridge = _first(world, "bridge")
    msgs = [{"role": "user", "content": f"Question: {bridge.question}"}]
    msgs += [
        {"role": "assistant", "content": backbone.reply(msgs)},
        _feedback([(bridge.decomposition[0].question, "unknown")]),
    ]
    assert backbone.reply(msgs) == "<stop/>"
    assert backbone.reply([{"role": "user", "content": "Question: not from this world"}]) == "<stop/>"


def test_answerer_composes_from_reports_only(world):
    answerer = ScriptedAnswerer(world)
    bridge = _first(world, "bridge")
    findings = [(h.question, Report(answer=h.answer, evidence="e")) for h in bridge.decomposition]
    assert answerer.answer(answerer_messages(bridge.question, findings)) == bridge.golden_answers[0]
    comp = _first(world, "comparison")
    a, b = comp.decomposition
    good = [(a.question, Report(answer=a.answer)), (b.question, Report(answer=b.answer))]
    assert answerer.answer(answerer_messages(comp.question, good)) == comp.golden_answers[0]
    # Reports in the other order are matched by the candidate named in each sub-query.
    assert answerer.answer(answerer_messages(comp.question, good[::-1])) == comp.golden_answers[0]
    # A report that flips the comparison flips the answer.
    a_val = int(a.answer.replace(",", "").split()[0])
    minimum = comp.compare["pick"] == "min"
    beats_a, loses_to_a = (a_val - 1, a_val + 1) if minimum else (a_val + 1, a_val - 1)
    flipped = str(beats_a if comp.golden_answers[0] == comp.compare["candidates"][0] else loses_to_a)
    wrong = [(a.question, Report(answer=a.answer)), (b.question, Report(answer=flipped))]
    assert answerer.answer(answerer_messages(comp.question, wrong)) != comp.golden_answers[0]


async def test_judge_is_exact_match_through_the_real_judge_prompt():
    judge = LLMJudge(ScriptedJudge())
    assert await judge.judge("q?", ["Republic of Dresk", "Dresk"], "dresk") is True
    assert await judge.judge("q?", ["1,250 km", "1250"], "1250") is True
    assert await judge.judge("q?", ["Korvash"], "Tamble") is False


@pytest.fixture(scope="module")
def episodes(world, world_dir, bm25):
    questions = load_questions(world_dir / "questions.jsonl")[:60]
    models = scripted_models(world)
    config = PipelineConfig(max_rounds=5)
    judge = LLMJudge(models["judge"])

    async def go():
        eps = list(
            await asyncio.gather(*(run_episode(q, models, bm25, config, judge=judge) for q in questions))
        )
        for ep in eps:
            for run in list(ep.runs):
                if (
                    run.role == "teacher"
                    and run.n_searches >= 2
                    and run.outcome.em == 1
                    and run.outcome.judge
                ):
                    cf = await run_counterfactual(
                        ep, run, models["teacher"], bm25, models["answerer"], judge=judge
                    )
                    ep.runs.append(cf)
        return eps

    return asyncio.run(go())


@pytest.mark.slow
def test_scripted_episodes_are_right_and_counterfactuals_fail_where_the_second_search_mattered(episodes):
    assert all(ep.stop_reason == "stopped" and ep.metrics.em == 1.0 for ep in episodes)
    kinds = {ep.episode_id: ep.question.model_extra["type"] for ep in episodes}
    runs = [(kinds[ep.episode_id], r) for ep in episodes for r in ep.runs]
    teacher = {r.run_id: r for _, r in runs if r.role == "teacher"}
    assert all(r.outcome.em == 1 and r.outcome.judge is True for r in teacher.values())
    multi = {rid for rid, r in teacher.items() if r.n_searches == 2}
    cf = [(kind, r) for kind, r in runs if r.role == "teacher_budget1"]
    assert multi and {r.counterfactual_of for _, r in cf} == multi
    for kind, r in cf:
        assert r.report.answer != teacher[r.counterfactual_of].report.answer
        if kind == "bridge":  # a wrong hop breaks the chain, so the final answer is wrong
            assert r.outcome.em == 0 and r.outcome.judge is False
    # Comparisons may keep their winner despite a wrong year: those are no information gain.
    assert sum(r.outcome.em == 0 for _, r in cf) >= 0.6 * len(cf)
    # The student (no reformulation) reports wrongly exactly where the teacher searched twice.
    for _, s in runs:
        if s.role == "student":
            t = teacher[s.run_id.rsplit("/", 1)[0] + "/teacher"]
            assert s.n_searches == 1
            assert (s.report.answer == t.report.answer) == (t.n_searches == 1)
            if kinds[s.run_id.split("/")[0]] == "bridge":
                assert (s.outcome.em == 1) == (t.n_searches == 1)


@pytest.mark.slow
def test_both_filter_strata_fill_from_scripted_collection(episodes):
    result = filter_episodes([ep.to_dict() for ep in episodes], FilterConfig())
    strata = Counter(row["stratum"] for row in result.rows)
    assert strata["single_search"] > 0 and strata["info_gain_multi_search"] > 0
    n_multi = sum(1 for ep in episodes for r in ep.runs if r.role == "teacher" and r.n_searches == 2)
    assert strata["info_gain_multi_search"] <= n_multi
    assert result.report["exclusions"].get("teacher_single_covered", 0) > 0
