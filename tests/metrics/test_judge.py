"""LLM judge: verdict parsing, temperature 0, caching in memory and on disk, failures."""

from __future__ import annotations

import asyncio
import json

import pytest

from executor_sft.llm.base import ChatError, SamplingParams
from executor_sft.metrics.judge import LLMJudge, parse_verdict
from tests.support.doubles import ScriptedChatModel

Q, GOLD = "Which province is Tarsin the capital of?", ["Eldmark"]


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("True", True),
        ("true.", True),
        ("  TRUE  ", True),
        ("**True**", True),
        ("`False`", False),
        ("False.", False),
        ("**False**", False),
        ("Yes", True),
        ("No.", False),
        ("Correct", True),
        ("Incorrect - it names another province.", False),
        ("Verdict: True", True),
        ("Final answer: **False**", False),
        ("<think>It could be false, but the gold matches.</think>\nTrue", True),
        ("reasoning only... </think> False", False),
        ("I think it's true", None),
        ("Not true", None),
        ("Truefalse", None),
        ("", None),
        (None, None),
        ("🙂", None),
        ("<think>True", None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) is verdict


async def test_judge_calls_at_temperature_zero_and_caches():
    model = ScriptedChatModel(["True", "False"])
    judge = LLMJudge(model, sampling=SamplingParams(temperature=0.9, max_tokens=8))
    assert await judge.judge(Q, GOLD, "Eldmark") is True
    assert await judge.judge(Q, GOLD, "Eldmark") is True  # cached: no second call
    assert len(model.requests) == 1
    request = model.requests[0]
    assert request["sampling"].temperature == 0.0 and request["sampling"].max_tokens == 8
    prompt = request["messages"][0]["content"]
    assert Q in prompt and "Eldmark" in prompt and "{question}" not in prompt
    assert await judge.judge(Q, GOLD, "Tarsin") is False
    assert len(model.requests) == 2


async def test_garbage_is_none_and_cached():
    model = ScriptedChatModel(["Maybe?"])
    judge = LLMJudge(model)
    assert await judge.judge(Q, GOLD, "Eldmark province") is None
    assert await judge.judge(Q, GOLD, "Eldmark province") is None
    assert len(model.requests) == 1


async def test_empty_prediction_is_false_without_a_call():
    model = ScriptedChatModel([])
    judge = LLMJudge(model)
    assert await judge.judge(Q, GOLD, None) is False
    assert await judge.judge(Q, GOLD, "  ") is False
    assert model.requests == []


async def test_transport_failure_raises_is_not_cached_and_is_retried_later():
    class Flaky:
        name = "flaky"

        def __init__(self):
            self.calls = 0

        async def chat(self, messages, tools=None, sampling=None):
            self.calls += 1
            if self.calls == 1:
                raise ChatError("timeout")
            return await ScriptedChatModel(["True"]).chat(messages, tools, sampling)

    model = Flaky()
    judge = LLMJudge(model)
    with pytest.raises(ChatError, match="timeout"):  # a failure is not a verdict
        await judge.judge(Q, GOLD, "Eldmark")
    assert judge.cache == {}
    assert await judge.judge(Q, GOLD, "Eldmark") is True
    assert model.calls == 2


async def test_callers_waiting_on_a_failed_verdict_get_the_failure():
    class Down:
        name = "down"

        async def chat(self, messages, tools=None, sampling=None):
            await asyncio.sleep(0.01)
            raise ChatError("judge endpoint down")

    judge = LLMJudge(Down())
    results = await asyncio.gather(
        *(judge.judge(Q, GOLD, "Eldmark") for _ in range(3)), return_exceptions=True
    )
    assert [type(r) for r in results] == [ChatError] * 3 and judge._inflight == {}


async def test_jsonl_cache_survives_a_new_judge(tmp_path):
    path = tmp_path / "judge_cache.jsonl"
    first = LLMJudge(ScriptedChatModel(["False"]), cache_path=path)
    assert await first.judge(Q, GOLD, "Tarsin") is False
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["prediction"] == "Tarsin" and rows[0]["verdict"] is False and rows[0]["raw"] == "False"
    path.write_text(path.read_text() + '{"broken": \n')  # a torn last line is skipped, not fatal
    model = ScriptedChatModel([])
    second = LLMJudge(model, cache_path=path)
    assert await second.judge(Q, GOLD, "Tarsin") is False
    assert model.requests == []
    # The key covers question, gold and prediction: a different gold answer is a new call.
    third = LLMJudge(ScriptedChatModel(["True"]), cache_path=path)
    assert await third.judge(Q, ["Eldmark", "Tarsin"], "Tarsin") is True
    # ... and the judge: another prompt or another judge model asks again.
    reworded = LLMJudge(
        ScriptedChatModel(["True"]), cache_path=path, prompt="Is {prediction} right? {question}"
    )
    assert await reworded.judge(Q, GOLD, "Tarsin") is True
    other_model = LLMJudge(ScriptedChatModel(["True"], name="another-judge"), cache_path=path)
    assert await other_model.judge(Q, GOLD, "Tarsin") is True


async def test_concurrent_identical_requests_share_one_call():
    model = ScriptedChatModel(["True"], latency_s=0.05)
    judge = LLMJudge(model)
    verdicts = await asyncio.gather(*(judge.judge(Q, GOLD, "Eldmark") for _ in range(5)))
    assert verdicts == [True] * 5 and len(model.requests) == 1
