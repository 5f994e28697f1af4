"""Aggregation on hand-built episodes; every expected number below is worked out by hand."""

from __future__ import annotations

import json

import pytest

from executor_sft.eval.aggregate import (
    EvalResults,
    GroupResult,
    Stat,
    macro_average,
    summarize,
    summarize_file,
    weighted_average,
)
from executor_sft.eval.config import MetricsConfig
from executor_sft.eval.report import results_markdown, sweep_markdown
from executor_sft.schema import Episode, EpisodeMetrics, ExecutorRun, Question, SearchRecord, Usage

QUESTIONS = {
    "a1": Question(
        id="a1", question="?", golden_answers=["x"], dataset="hotpotqa", positive_doc_ids=["g1", "g2"]
    ),
    "a2": Question(id="a2", question="?", golden_answers=["x"], dataset="hotpotqa"),
    "b1": Question(id="b1", question="?", golden_answers=["x"], dataset="musique"),
}


def _run(i: int, steps: list[tuple[int, list[str] | None]], role: str = "teacher") -> ExecutorRun:
    """A run whose calls cost `tokens` each; a call with doc ids searched, None reported."""
    messages, calls, searches = [{"role": "user", "content": "q"}], [], []
    for turn, (tokens, docs) in enumerate(steps):
        calls.append(
            {"usage": {"prompt_tokens": tokens, "completion_tokens": 0}, "t_start": float(10 * i + turn)}
        )
        if docs is None:
            messages.append({"role": "assistant", "content": "<answer>x</answer>"})
        else:
            tc = {"id": f"c{turn}", "type": "function", "function": {"name": "search", "arguments": "{}"}}
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [tc]},
                {"role": "tool", "content": ""},
            ]
            searches.append(SearchRecord(query="q", doc_ids=docs))
    return ExecutorRun(
        run_id=f"r{i}",
        round=0,
        sub_query_index=i,
        sub_query="q",
        role=role,
        model="m",
        max_turns=3,
        max_searches=2,
        messages=messages,
        searches=searches,
        n_searches=len(searches),
        finish="report",
        usage=Usage(prompt_tokens=sum(t for t, _ in steps), calls=len(steps)),
        calls=calls,
    )


def _ep(qid: str, sample: int, em: float, f1: float, judge: bool | None, runs: list[ExecutorRun]) -> Episode:
    # A shadow student run that must never be counted as the system's.
    shadow = _run(9, [(99_999, ["g1", "g2"]), (1, None)], role="student")
    return Episode(
        episode_id=f"{qid}#{sample}",
        sample_index=sample,
        question=QUESTIONS[qid],
        runs=[*runs, shadow],
        answer="x" if em else "y",
        metrics=EpisodeMetrics(em=em, f1=f1, judge=judge),
        config={"driver": "teacher"},
    )


def episodes() -> list[Episode]:
    return [
        _ep("a1", 0, 1.0, 1.0, True, [_run(0, [(600, ["g1", "z"]), (400, None)])]),
        _ep("a1", 1, 0.0, 0.5, False, [_run(0, [(800, ["g1"]), (1000, ["g2"]), (1200, None)])]),
        _ep("a2", 0, 1.0, 1.0, None, []),  # the backbone answered without any sub-query
        _ep("a2", 1, 0.0, 0.0, True, [_run(0, [(500, None)])]),
        _ep(
            "b1",
            0,
            1.0,
            1.0,
            True,
            [_run(0, [(300, ["d"]), (100, None)]), _run(1, [(600, ["d"]), (0, None)])],
        ),
        _ep("b1", 1, 1.0, 1.0, True, [_run(0, [(1000, ["d"]), (500, ["e"]), (500, None)])]),
    ]


def test_per_dataset_numbers():
    r = summarize(episodes(), "hand", bucket_tokens=1_000, n_buckets=2)
    a, b = r.datasets["hotpotqa"], r.datasets["musique"]
    assert (a.n_questions, a.n_episodes, b.n_questions) == (2, 4, 1)
    # EM: per question (1+0)/2 and (1+0)/2 -> 0.5; per sample index 1.0 and 0.0 -> std 0.5.
    assert (a.em.mean, a.em.std, a.em.k) == pytest.approx((0.5, 0.5, 2))
    # F1: (1+0.5)/2=0.75 and (1+0)/2=0.5 -> 0.625; sample means 1.0 and 0.25 -> std 0.375.
    assert (a.f1.mean, a.f1.std) == pytest.approx((0.625, 0.375))
    # Judge over verdicts only: a1 (1+0)/2, a2 1/1 -> 0.75 over 2 questions; samples 1.0, 0.5.
    assert (a.judge.mean, a.judge.std, a.judge.n) == pytest.approx((0.75, 0.25, 2))
    # Sub-agent tokens: a1 (1000+3000)/2=2000, a2 (0+500)/2=250 -> 1125 (student shadow excluded).
    assert a.subagent_tokens.mean == pytest.approx(1125)
    assert (a.searches["0"], a.searches["1"], a.searches[">=2"]) == (1, 1, 1)
    assert a.no_subquery_share == pytest.approx(0.25)
    # CER-C (B=1000, N=2), a1 only: #0 g1 at 600 -> [0.5, 0.5]; #1 g1 at 800, g2 at 1800 -> [0.5, 1.0].
    assert a.cer_c.mean == pytest.approx(0.625)
    assert a.cer_curve == pytest.approx([0.5, 0.75])
    assert b.em.mean == 1.0 and b.judge.mean == 1.0 and b.cer_c is None
    assert b.subagent_tokens.mean == pytest.approx((1000 + 2000) / 2)
    assert (b.searches["1"], b.searches[">=2"]) == (2, 1)


def test_weighted_and_macro_averages_and_pooled():
    r = summarize(episodes(), "hand", bucket_tokens=1_000, n_buckets=2)
    # avg: every question counts once (hotpotqa has 2 questions, musique 1), as the paper's "Avg.".
    assert r.average["em"] == pytest.approx((2 * 0.5 + 1 * 1.0) / 3)
    assert r.metric("em") == r.average["em"] == pytest.approx(r.pooled.em.mean)
    assert r.average["judge"] == pytest.approx((2 * 0.75 + 1 * 1.0) / 3)
    assert r.average["subagent_tokens"] == pytest.approx((2 * 1125 + 1 * 1500) / 3)
    assert r.average["search_2plus"] == pytest.approx(1 / 3)
    assert r.average["cer_c"] == pytest.approx(0.625)  # only datasets with gold ids count
    assert r.average["cover_em"] == pytest.approx(r.average["em"])
    # macro: the plain mean over datasets, kept under its own name.
    assert r.macro["em"] == r.metric("em", macro=True) == pytest.approx((0.5 + 1.0) / 2)
    assert r.macro["judge"] == pytest.approx((0.75 + 1.0) / 2)
    assert r.macro["subagent_tokens"] == pytest.approx((1125 + 1500) / 2)
    assert r.macro["search_2plus"] == pytest.approx((1 / 3 + 1 / 3) / 2)
    # Pooled: EM per question 0.5, 0.5, 1.0 -> 2/3.
    assert r.pooled.em.mean == pytest.approx(2 / 3)
    assert r.pooled.n_questions == 3


def _judged(name: str, judge: float, n: int) -> GroupResult:
    stat = Stat(mean=judge, std=0.0, k=4, n=n)
    return GroupResult(name, n, 4 * n, None, None, stat, None, {}, None, None, 0.0, 0.0)


def test_paper_tab3_qwen3_row_average_is_weighted_by_tab8_counts():
    # Tab. 3, Qwen3-1.7B executor, judge per dataset; instances per dataset from Tab. 8.
    row = {"2wiki": (75.38, 991), "hotpotqa": (70.89, 963), "musique": (35.36, 988)}
    row |= {"popqa": (46.70, 818), "bamboogle": (54.13, 109)}
    groups = [_judged(d, v / 100, n) for d, (v, n) in row.items()]
    results = EvalResults("tab3", {g.name: g for g in groups}, weighted_average(groups), groups[0])
    results.macro = macro_average(groups)
    assert round(100 * results.metric("judge"), 2) == 57.38  # the paper's reported "Avg."
    assert round(100 * results.metric("judge", macro=True), 2) == 56.49


def test_rescoring_with_a_named_normalisation():
    q = Question(id="d", question="?", golden_answers=["1990–1995"], dataset="x")
    ep = Episode(episode_id="d#0", question=q, answer="1990-1995", metrics=EpisodeMetrics(em=1.0, f1=1.0))
    assert summarize([ep]).average["em"] == 1.0  # stored values when no normalisation is named
    assert summarize([ep], normalization="squad").average["em"] == 0.0  # SQuAD keeps the en dash
    unicode = summarize([ep], normalization="unicode")
    assert unicode.average["em"] == 1.0 and unicode.settings["normalization"] == "unicode"


def test_per_run_exclusion_is_gone_with_a_pointer_to_the_eval_set():
    with pytest.raises(ValueError, match="build_eval_set.py"):
        MetricsConfig.model_validate({"exclude_no_subquery": True})
    r = summarize(episodes())
    assert r.datasets["hotpotqa"].n_episodes == 4  # no-sub-query episodes are scored like any other
    assert r.datasets["hotpotqa"].no_subquery_share == pytest.approx(0.25)  # and still reported


def test_json_round_trip_and_markdown(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(e.to_json() + "\n" for e in episodes()))
    r = summarize_file(path, bucket_tokens=1_000, n_buckets=2)
    saved = r.save_json(tmp_path / "results.json")
    loaded = EvalResults.load_json(saved)
    assert loaded.datasets["hotpotqa"].em == r.datasets["hotpotqa"].em
    assert json.loads(saved.read_text())["average"]["em"] == pytest.approx(2 / 3)
    assert json.loads(saved.read_text())["macro"]["em"] == pytest.approx(0.75)
    assert loaded.macro == pytest.approx(r.macro)
    md = results_markdown(loaded)
    row = "| hotpotqa | 2 | 2 | 50.0 ± 50.0 | 50.0 ± 50.0 | 62.5 ± 37.5 | 75.0 ± 25.0 | 1,125 | 33 | 33 | 62.5 | – | 25 | – | – | – |"
    assert row in md
    assert "| **avg** (weighted by questions) | 3 |  | 66.7 | 66.7 |" in md
    assert "| macro (mean over datasets) | 3 |  | 75.0 |" in md
    table = sweep_markdown([("cell", "bb", "ex", loaded)])
    assert "| cell | bb | ex | 66.7 | 66.7 |" in table and "EM musique" in table


def _timed() -> list[Episode]:
    """Searches of 0.1, 0.2, 0.4 s (a1#0) and 0.3, 1.0 s (b1#0); research 1, 10 and 2 s."""
    eps = episodes()
    timings = {"a1#0": ([0.1], 1.0), "a1#1": ([0.2, 0.4], 10.0), "b1#0": ([0.3, 1.0], 2.0)}
    for e in eps:
        if e.episode_id not in timings:
            continue
        latencies, e.research_s = timings[e.episode_id]
        searches = [s for r in e.runs if r.role == "teacher" for s in r.searches]
        for search, t in zip(searches, latencies, strict=True):
            search.latency_s, search.retriever = t, "bm25-x"
        e.runs[-1].searches[0].latency_s = 99.0  # the shadow student's: never counted
    return eps


def test_search_and_research_latency_percentiles_by_hand():
    r = summarize(_timed())
    a = r.datasets["hotpotqa"]
    # hotpotqa searches 0.1, 0.2, 0.4: P50 0.2; P95 at rank 0.95 * 2 = 1.9: 0.2 + 0.9 * 0.2 = 0.38.
    assert (a.t_search_p50, a.t_search_p95) == pytest.approx((0.2, 0.38))
    assert a.research_p50 == pytest.approx(5.5)  # 1 and 10 (untimed episodes do not count)
    assert r.datasets["musique"].research_p50 == pytest.approx(2.0)
    # Pooled 0.1, 0.2, 0.3, 0.4, 1.0: P50 0.3; P95 at rank 3.8: 0.4 + 0.8 * 0.6 = 0.88; research 1, 2, 10.
    assert (r.pooled.t_search_p50, r.pooled.t_search_p95, r.pooled.research_p50) == pytest.approx(
        (0.3, 0.88, 2.0)
    )
    assert r.average["t_search_p95"] == r.macro["t_search_p95"] == r.pooled.t_search_p95
    md = results_markdown(r)
    assert "| T_search P50 ms | T_search P95 ms | research P50 s |" in md
    assert md.count("| 300 | 880 | 2.0 |") == 2 and "episodes in flight" not in md
    assert "times are wall-clock" in md
    assert "| 300 | 880 | 2.0 |" in sweep_markdown([("cell", "bb", "ex", r)])
    assert summarize(episodes()).pooled.t_search_p50 is None  # nothing timed


def test_answer_bearing_cer_c_in_the_tables():
    texts = {"g1": "title\nno answer here", "z": "x marks the spot", "d": "d", "e": "an x"}
    r = summarize(episodes(), bucket_tokens=1_000, n_buckets=2, passages=texts.get)
    # Gold answer "x". a1#0: z at 600 -> [1, 1]; a1#1: never -> [0, 0]; a2#1 searched nothing.
    # b1#0: d only -> 0; b1#1: e at 1500 -> [0, 1].
    a, b = r.datasets["hotpotqa"], r.datasets["musique"]
    assert a.cer_c_answer.mean == pytest.approx((0.5 + 0.0) / 2)  # a1 (1+0)/2, a2 0 (no search)
    assert b.cer_c_answer.mean == pytest.approx((0.0 + 0.5) / 2)
    assert a.cer_c.mean == pytest.approx(0.625)  # the gold-passage CER-C is unchanged beside it
    md = results_markdown(r)
    assert "CER-C (answer-bearing)" in md and "contains a normalised gold answer alias" in md
    assert "contains a normalised gold answer alias" in sweep_markdown([("cell", "bb", "ex", r)])
    assert summarize(episodes()).pooled.cer_c_answer is None


def test_single_agent_episode_counts_its_agent(tmp_path):
    run = _run(0, [(700, ["g1"]), (300, None)], role="single_agent")
    ep = Episode(episode_id="a1#0", question=QUESTIONS["a1"], runs=[run], config={"mode": "single_agent"})
    r = summarize([ep], bucket_tokens=1_000, n_buckets=1)
    assert r.datasets["hotpotqa"].subagent_tokens.mean == 1000
    assert r.datasets["hotpotqa"].no_subquery_share == 0.0
    assert r.datasets["hotpotqa"].cer_c.mean == pytest.approx(0.5)


def test_bad_episode_file_names_the_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(episodes()[0].to_json() + "\n" + json.dumps({"episode_id": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"episodes.jsonl:2: .*question"):
        summarize_file(path)


def _plumbing_judge_episodes(agreeing: int, disagreeing: int) -> list[Episode]:
    """A judge that says True to wrong answers (gold "Rush", answer "Counterparts"), as the
    offline SmolLM2 judge does, on `disagreeing` episodes; EM and judge agree on the rest."""
    q = Question(id="r", question="Who?", golden_answers=["Rush"], dataset="musique")
    wrong = EpisodeMetrics(em=0.0, f1=0.0, judge=True)
    right = EpisodeMetrics(em=1.0, f1=1.0, judge=True)
    eps = [
        Episode(
            episode_id=f"r#{i}",
            sample_index=i,
            question=q,
            answer="The answer is: Counterparts",
            metrics=wrong,
        )
        for i in range(disagreeing)
    ]
    eps += [
        Episode(episode_id=f"r#{i}", sample_index=i, question=q, answer="Rush", metrics=right)
        for i in range(disagreeing, disagreeing + agreeing)
    ]
    return eps


def test_a_judge_that_disagrees_with_em_on_most_episodes_is_flagged(tmp_path):
    from executor_sft.eval.runner import EvalRun

    r = summarize(_plumbing_judge_episodes(agreeing=1, disagreeing=4), "offline", normalization="squad")
    g = r.datasets["musique"]
    assert (g.judge_em_disagreement, g.judged_episodes) == (pytest.approx(0.8), 5)
    assert (r.average["em"], r.average["judge"]) == (pytest.approx(0.2), pytest.approx(1.0))
    md = results_markdown(r)
    assert "| 20.0 ± 40.0 | 100.0 ± 0.0 † |" in md  # F1, then the judge with its flag
    assert "† the judge disagrees with EM on 80% of the 5 judged episodes" in md
    table = sweep_markdown([("smollm2", "oracle", "smollm2", r)])
    assert "| 100.0 † |" in table and "judged episodes of smollm2" in table
    summary = EvalRun(r, tmp_path).summary()
    assert "judge disagrees with EM on 80%" in summary.splitlines()[2]
    # Round trip: an older results.json without the field loads as "not measured".
    loaded = EvalResults.load_json(r.save_json(tmp_path / "results.json"))
    assert loaded.pooled.judge_em_disagreement == pytest.approx(0.8)
    old = json.loads((tmp_path / "results.json").read_text())
    for group in [old["pooled"], *old["datasets"].values()]:
        del group["judge_em_disagreement"], group["judged_episodes"]
    assert EvalResults.from_dict(old).pooled.judge_em_disagreement is None


def test_a_judge_that_agrees_on_half_or_more_is_not_flagged(tmp_path):
    half = summarize(_plumbing_judge_episodes(agreeing=2, disagreeing=2), "half", normalization="squad")
    assert half.pooled.judge_em_disagreement == pytest.approx(0.5)
    assert "†" not in results_markdown(half) and "†" not in sweep_markdown([("c", "b", "e", half)])
    hand = summarize(episodes())
    # Judged: a1#0 agree, a1#1 agree, a2#1 (EM 0, judge True) disagrees, b1#0 and b1#1 agree.
    assert hand.datasets["hotpotqa"].judge_em_disagreement == pytest.approx(1 / 3)
    assert hand.pooled.judge_em_disagreement == pytest.approx(1 / 5)
    assert "†" not in results_markdown(hand)
