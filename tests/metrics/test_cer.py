"""CER-C: the worked example, the bucket boundary rule and token placement from episodes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_sft.metrics.cer import answer_bearing_cer_c, cer_c, cer_events_from_episode, episode_cer_c
from executor_sft.schema import Episode, ExecutorRun, Question, SearchRecord, Usage

GOLD = ["g1", "g2", "g3", "g4", "g5"]


def test_worked_example():
    # 3 of 5 gold within the first 10K tokens, a 4th by 20K, all 5 by 30K.
    events = [(3_000, ["g1", "x", "g2"]), (8_000, ["g3"]), (15_000, ["g4", "x"]), (25_000, ["g5", "g1"])]
    curve, auc = cer_c(events, GOLD)
    assert curve == pytest.approx([0.6, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert auc == pytest.approx((0.6 + 0.8 + 8 * 1.0) / 10)


def test_boundary_belongs_to_lower_bucket():
    curve, _ = cer_c([(10_000, ["g1"]), (10_001, ["g2"]), (0, ["g3"])], GOLD, n_buckets=3)
    # exactly 1*B -> bucket 1; one token more -> bucket 2; zero tokens -> bucket 1.
    assert curve == pytest.approx([0.4, 0.6, 0.6])


def test_retrievals_beyond_the_last_bucket_do_not_count_and_first_sighting_wins():
    curve, auc = cer_c([(25_000, ["g1"]), (5_000, ["g1"]), (31_000, ["g2"])], ["g1", "g2"], 10_000, 3)
    assert curve == [0.5, 0.5, 0.5]
    assert auc == pytest.approx(0.5)


def test_custom_bucket_size_and_bad_input():
    curve, _ = cer_c([(150, ["g1"])], ["g1"], bucket_tokens=100, n_buckets=2)
    assert curve == [0.0, 1.0]
    with pytest.raises(ValueError, match="gold"):
        cer_c([(1, ["g1"])], [])
    with pytest.raises(ValueError, match="positive"):
        cer_c([(1, ["g1"])], ["g1"], bucket_tokens=0)


@given(
    st.lists(st.tuples(st.integers(0, 120_000), st.lists(st.sampled_from(GOLD + ["x", "y"]), max_size=4))),
    st.integers(1, 20_000),
)
def test_curve_is_a_monotone_fraction(events, bucket):
    curve, auc = cer_c(events, GOLD, bucket_tokens=bucket, n_buckets=6)
    assert all(0.0 <= a <= b <= 1.0 for a, b in zip(curve, curve[1:], strict=False))
    assert auc == pytest.approx(sum(curve) / 6)
    found = {d for t, ids in events for d in ids if d in GOLD and t <= 6 * bucket}
    assert curve[-1] == pytest.approx(len(found) / len(GOLD))


def _call(tokens: int, t_start: float | None = None) -> dict:
    call = {"model": "m", "messages": [], "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10}}
    if t_start is not None:
        call["t_start"] = t_start
    return call


def _search_turn(i: int) -> list[dict]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": '{"query": "q"}'}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "Doc 1"},
    ]


def _run(sqi: int, docs: list[list[str]], calls: list[dict], role: str = "teacher", **extra) -> ExecutorRun:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    for i in range(len(docs)):
        messages += _search_turn(i)
    messages.append({"role": "assistant", "content": "<answer>a</answer>"})
    return ExecutorRun(
        run_id=f"{role}/r0/q{sqi}",
        round=0,
        sub_query_index=sqi,
        sub_query="q",
        role=role,
        model="m",
        max_turns=3,
        max_searches=2,
        messages=messages,
        n_searches=len(docs),
        finish="report",
        searches=[SearchRecord(query="q", doc_ids=d) for d in docs],
        calls=calls,
        **extra,
    )


def _episode(runs, gold=("g1", "g2", "g3"), driver="teacher") -> Episode:
    q = Question(id="q1", question="?", golden_answers=["a"], positive_doc_ids=list(gold))
    return Episode(episode_id="e", question=q, runs=runs, config={"driver": driver})


def test_events_follow_call_start_order_across_parallel_runs():
    # Run A: calls at t=0 (6K tokens, searches g1), t=2 (7K, searches g2), t=4 (1K, report).
    # Run B: calls at t=1 (5K, searches g3), t=3 (2K, report). Started order: A0 B0 A1 B1 A2.
    a = _run(0, [["g1"], ["g2"]], [_call(6_000, 0.0), _call(7_000, 2.0), _call(1_000, 4.0)])
    b = _run(1, [["g3"]], [_call(5_000, 1.0), _call(2_000, 3.0)])
    shadow = _run(0, [["g1", "g2", "g3"]], [_call(100, 0.5), _call(100, 0.6)], role="student")
    ep = _episode([a, b, shadow])
    events = cer_events_from_episode(ep)
    assert events == [(6_000, ["g1"]), (18_000, ["g2"]), (11_000, ["g3"])]
    curve, auc = episode_cer_c(ep, bucket_tokens=10_000, n_buckets=3)
    assert curve == pytest.approx([1 / 3, 1.0, 1.0])
    # The shadow role consumed no context of the deployed system, unless asked for.
    assert cer_events_from_episode(ep, roles=["student"]) == [(100, ["g1", "g2", "g3"])]


def test_events_without_start_times_use_dispatch_order_and_split_reported_usage():
    a = _run(0, [["g1"]], [])
    a.usage = Usage(prompt_tokens=900, completion_tokens=100, calls=2)
    b = _run(1, [["g2"]], [])
    b.usage = Usage(prompt_tokens=3000, completion_tokens=0, calls=2)
    events = cer_events_from_episode(_episode([a, b]))
    # Without per-call records the run total is split over its calls; the total stays exact.
    assert 0 < events[0][0] < 1_000
    assert 1_000 < events[1][0] < 4_000
    assert episode_cer_c(_episode([a, b], gold=())) is None


PASSAGES = {
    "p1": "Abbey Road\nRecorded in London in 1969.",
    "p2": "Please Please Me\nThe debut album of THE BEATLES, released in 1963.",
    "p3": "Bananas\nA beatle is not a band.",
}


def test_answer_bearing_cer_c_counts_passages_that_contain_a_gold_alias():
    # Driver run: 6K tokens then a search of p1, p3 (no alias: "beatle" is not "beatles"), 7K tokens
    # then a search of p2 ("THE BEATLES" normalises to "beatles"), 1K to report. Gold passage ids
    # are absent, so plain CER-C is undefined; the proxy's one relevant item arrives at 13K.
    run = _run(
        0, [["p1", "p3"], ["p2", "unknown"]], [_call(6_000, 0.0), _call(7_000, 1.0), _call(1_000, 2.0)]
    )
    shadow = _run(1, [["p2"]], [_call(10, 0.5), _call(10, 0.6)], role="student")
    ep = _episode([run, shadow], gold=())
    ep.question.golden_answers = ["The Beatles", "Beatles"]
    assert episode_cer_c(ep) is None
    curve, auc = answer_bearing_cer_c(ep, PASSAGES.get, bucket_tokens=10_000, n_buckets=3)
    assert curve == [0.0, 1.0, 1.0] and auc == pytest.approx(2 / 3)
    # Found in the first bucket when the alias is the 1969 of p1 instead.
    ep.question.golden_answers = ["1969"]
    assert answer_bearing_cer_c(ep, PASSAGES.get, bucket_tokens=10_000, n_buckets=3) == ([1.0] * 3, 1.0)
    # Never found: unknown passages are not evidence.
    ep.question.golden_answers = ["Ringo"]
    assert answer_bearing_cer_c(ep, PASSAGES.get, bucket_tokens=10_000, n_buckets=3) == ([0.0] * 3, 0.0)
    ep.question.golden_answers = [" "]
    assert answer_bearing_cer_c(ep, PASSAGES.get) is None


def test_token_count_readings_of_one_run():
    # Three calls whose prompt+completion grow 100 -> 250 -> 400 (the context), completions 20/30/40.
    from types import SimpleNamespace

    from executor_sft.metrics.cer import call_tokens

    calls = [
        {"usage": {"prompt_tokens": 80, "completion_tokens": 20}},
        {"usage": {"prompt_tokens": 220, "completion_tokens": 30}},
        {"usage": {"prompt_tokens": 360, "completion_tokens": 40}},
    ]
    run = SimpleNamespace(
        calls=calls, messages=[], usage=SimpleNamespace(prompt_tokens=660, completion_tokens=90)
    )
    assert call_tokens(run, token_count="calls") == [100, 250, 400]  # every prompt counted again
    assert call_tokens(run, token_count="context") == [100, 150, 150]  # sums to the context, 400
    assert call_tokens(run, token_count="completion") == [20, 30, 40]
    with pytest.raises(ValueError, match="token_count"):
        call_tokens(run, token_count="prompt")
