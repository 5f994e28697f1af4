"""Sub-agent token accounting and the searches-per-invocation histogram."""

from __future__ import annotations

import pytest

from executor_sft.metrics.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    call_usages,
    count_message_tokens,
    driver_role,
    search_histogram,
    subagent_tokens,
)
from executor_sft.schema import Episode, ExecutorRun, Question, Usage
from tests.support import tiny_qwen3_tokenizer


def _run(role="teacher", n_searches=1, usage=(0, 0), messages=None, **extra) -> ExecutorRun:
    return ExecutorRun(
        run_id=f"{role}-{n_searches}-{usage}",
        round=0,
        sub_query_index=0,
        sub_query="q",
        role=role,
        model="m",
        max_turns=3,
        max_searches=2,
        n_searches=n_searches,
        usage=Usage(prompt_tokens=usage[0], completion_tokens=usage[1], calls=1),
        messages=messages or [],
        **extra,
    )


def _episode(runs, config=None) -> Episode:
    q = Question(id="q", question="?", golden_answers=["a"])
    return Episode(episode_id="e", question=q, runs=runs, config=config or {})


def test_subagent_tokens_count_the_driver_runs_only():
    runs = [
        _run("teacher", usage=(1000, 200)),
        _run("teacher", usage=(500, 50)),
        _run("student", usage=(10_000, 10)),
        _run("teacher", usage=(7_000, 7), counterfactual_of="x"),
    ]
    ep = _episode(runs, {"driver": "teacher"})
    assert subagent_tokens(ep) == 1750
    assert subagent_tokens(ep, roles=["student"]) == 10_010
    assert driver_role(_episode(runs[2:3])) == "student"  # one role only: that role drives
    assert driver_role(_episode(runs)) == "teacher"  # the documented default


def test_missing_usage_is_counted_with_the_tokenizer():
    words = lambda text: len(text.split())  # noqa: E731 - a tokenizer as a plain callable
    messages = [
        {"role": "system", "content": "you are an executor"},
        {"role": "user", "content": "who wrote it"},
        {"role": "assistant", "content": "<answer>Ann Lee</answer>"},
    ]
    run = _run(usage=(0, 0), messages=messages)
    prompt = (4 + MESSAGE_OVERHEAD_TOKENS) + (3 + MESSAGE_OVERHEAD_TOKENS)
    completion = 2 + MESSAGE_OVERHEAD_TOKENS
    assert call_usages(run, words) == [prompt + completion]
    assert subagent_tokens(_episode([run]), tokenizer=words) == prompt + completion


def test_chat_template_counting_matches_the_tokenizer():
    tok = tiny_qwen3_tokenizer()
    messages = [{"role": "user", "content": "capital of France"}, {"role": "assistant", "content": "Paris"}]
    expected = len(tok.apply_chat_template(messages, tokenize=True)["input_ids"])
    assert count_message_tokens(messages, tok) == expected


def test_recorded_per_call_usage_wins():
    calls = [
        {"usage": {"prompt_tokens": 100, "completion_tokens": 5}},
        {"usage": {"prompt_tokens": 180, "completion_tokens": 9}},
    ]
    assert call_usages(_run(usage=(280, 14), calls=calls)) == [105, 189]


def test_search_histogram():
    runs = [_run(n_searches=n) for n in (0, 1, 1, 1, 2, 3)]
    hist = search_histogram(runs)
    assert (hist.zero, hist.one, hist.two_plus, hist.total) == (1, 3, 2, 6)
    assert hist.fractions() == pytest.approx({"0": 1 / 6, "1": 0.5, ">=2": 1 / 3})
    assert search_histogram([]).fractions() == {"0": 0.0, "1": 0.0, ">=2": 0.0}
