"""The request cache: greedy requests are answered once, the key covers the whole request, the file survives a kill.

Requests reach it the way the agents send them: `call_model` inside `cache.in_use()`."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from executor_sft.agents.calls import call_model
from executor_sft.llm.base import ChatError, SamplingParams
from executor_sft.llm.request_cache import RequestCache, request_key
from tests.support.doubles import ScriptedChatModel

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "who?"}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


def echo_model(name: str = "m") -> ScriptedChatModel:
    """Replies with a counter, so a replayed answer is told apart from a new one."""
    n = iter(range(10_000))
    return ScriptedChatModel(name=name, default=lambda messages, tools: f"reply {next(n)}")


def ask(cache: RequestCache, model, messages=MESSAGES, tools=None, sampling=GREEDY, *, key=None):
    """One `call_model` with `model` covered by `cache` (keyed by `key`, default its name)."""
    cache.cover({"role": model}, model_keys={"role": key} if key else None)

    async def call():
        with cache.in_use():
            return await call_model(model, messages, tools, sampling)

    return asyncio.run(call())


def test_greedy_request_is_answered_once_and_persists(tmp_path):
    path = tmp_path / "rollouts.llm_cache.jsonl"
    inner = echo_model()
    cache = RequestCache(path)
    first = ask(cache, inner, MESSAGES, TOOLS)
    second = ask(cache, inner, MESSAGES, TOOLS)
    assert len(inner.requests) == 1 and (cache.hits, cache.misses) == (1, 1)
    assert second.message == first.message and second.usage == first.usage
    assert second.record.latency_s == first.record.latency_s and second.record.model == first.record.model

    # a new process (a resumed run) reads the file and sends nothing
    inner2 = echo_model()
    again = ask(RequestCache(path), inner2, MESSAGES, TOOLS)
    assert inner2.requests == [] and again.message == first.message


def test_no_cache_in_use_or_an_uncovered_model_sends_every_request():
    inner, other = echo_model(), echo_model("other")
    cache = RequestCache().cover({"role": inner})
    asyncio.run(call_model(inner, MESSAGES, None, GREEDY))  # outside `in_use`
    ask(cache, inner)
    ask(cache, inner)

    async def uncovered():
        with cache.in_use():
            return [await call_model(other, MESSAGES, None, GREEDY) for _ in range(2)]

    asyncio.run(uncovered())
    assert len(inner.requests) == 2 and len(other.requests) == 2 and cache.hits == 1


def test_hit_returns_a_copy():
    model, cache = echo_model(), RequestCache()
    ask(cache, model).message["content"] = "changed by a caller"
    assert ask(cache, model).message["content"] == "reply 0"


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [*MESSAGES[:1], {"role": "user", "content": "who else?"}]},
        {"tools": None},
        {"tools": [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "lookup"}}]},
        {"sampling": dataclasses.replace(GREEDY, max_tokens=65)},
        {"sampling": dataclasses.replace(GREEDY, top_p=0.9)},
        {"sampling": dataclasses.replace(GREEDY, seed=1)},
        {"sampling": dataclasses.replace(GREEDY, stop=["</search>"])},
        {"sampling": dataclasses.replace(GREEDY, enable_thinking=True)},
        {"sampling": dataclasses.replace(GREEDY, extra_body={"repetition_penalty": 1.1})},
        {"model_key": "another model"},
    ],
    ids=lambda c: next(iter(c)) + ("" if "sampling" not in c else f":{c['sampling']}"),
)
def test_every_part_of_the_request_is_in_the_key(change, tmp_path):
    base = {"model_key": "m", "messages": MESSAGES, "tools": TOOLS, "sampling": GREEDY}
    changed = {**base, **change}
    assert request_key(**changed) != request_key(**base)
    inner = echo_model()
    ask(RequestCache(tmp_path / "cache.jsonl"), inner, MESSAGES, TOOLS, key="m")
    cache = RequestCache(tmp_path / "cache.jsonl")  # holds that answer, under "m"
    ask(cache, inner, changed["messages"], changed["tools"], changed["sampling"], key=changed["model_key"])
    assert len(inner.requests) == 2 and (cache.hits, cache.misses) == (0, 1)


def test_key_ignores_dict_order_and_uses_the_models_defaults():
    reordered = [{"content": m["content"], "role": m["role"]} for m in MESSAGES]
    assert request_key("m", reordered, TOOLS, GREEDY) == request_key("m", MESSAGES, TOOLS, GREEDY)
    inner = echo_model()
    inner.sampling = GREEDY  # a backend's own defaults apply when a call passes none
    cache = RequestCache()
    ask(cache, inner, MESSAGES, TOOLS, None)
    ask(cache, inner, MESSAGES, TOOLS, GREEDY)
    assert len(inner.requests) == 1


def test_sampled_and_multi_completion_requests_are_not_cached(tmp_path):
    path = tmp_path / "cache.jsonl"
    inner = echo_model()
    cache = RequestCache(path)
    for sampling in (
        SamplingParams(temperature=0.7),
        dataclasses.replace(GREEDY, extra_body={"n": 2}),
        dataclasses.replace(GREEDY, extra_body={"best_of": 3}),
        dataclasses.replace(GREEDY, logprobs=0),
    ):
        ask(cache, inner, MESSAGES, None, sampling)
        ask(cache, inner, MESSAGES, None, sampling)
    assert len(inner.requests) == 8 and cache.hits == 0
    assert not path.exists()


class FailsFirst:
    """Raises `error` on its first request (after `latency_s`), then echoes."""

    name = "fails-first"

    def __init__(self, error: Exception, latency_s: float = 0.0):
        self.error, self.latency_s, self.calls = error, latency_s, 0

    async def chat(self, messages, tools=None, sampling=None):
        self.calls += 1
        await asyncio.sleep(self.latency_s)
        if self.calls == 1:
            raise self.error
        return await echo_model().chat(messages, tools, sampling)


def test_failures_are_not_cached():
    model, cache = FailsFirst(ChatError("503")), RequestCache()
    with pytest.raises(ChatError):
        ask(cache, model)
    ask(cache, model)
    ask(cache, model)
    assert model.calls == 2


def test_identical_requests_in_flight_are_sent_once():
    inner = ScriptedChatModel(name="slow", latency_s=0.05, default="done")
    cache = RequestCache().cover({"role": inner})

    async def all_at_once():
        with cache.in_use():
            return await asyncio.gather(*(call_model(inner, MESSAGES, None, GREEDY) for _ in range(5)))

    results = asyncio.run(all_at_once())
    assert len(inner.requests) == 1 and {r.message["content"] for r in results} == {"done"}
    assert (cache.hits, cache.misses) == (4, 1) and not cache._inflight


def test_a_failed_first_sender_lets_the_waiting_twins_send_it_themselves():
    model = FailsFirst(ValueError("a backend's own failure on this request"), latency_s=0.05)
    cache = RequestCache().cover({"role": model})

    async def both():
        with cache.in_use():
            return await asyncio.gather(*(call_model(model, MESSAGES, None, GREEDY) for _ in range(2)))

    first, second = asyncio.run(both())
    assert first.error and "ValueError" in first.error and second.message["content"] == "reply 0"
    assert model.calls == 2 and (cache.hits, cache.misses) == (0, 1)
    assert not cache._inflight and len(cache) == 0  # the twin's answer is not kept


def test_torn_last_line_is_skipped_and_the_next_answer_lands_on_its_own_line(tmp_path):
    path = tmp_path / "cache.jsonl"
    ask(RequestCache(path), echo_model())
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"key": "abc", "result": {"mess')  # a writer killed mid-line
    cache = RequestCache(path)
    assert len(cache) == 1
    other = [{"role": "user", "content": "and then?"}]
    ask(cache, echo_model(), other)
    reloaded = RequestCache(path)
    assert len(reloaded) == 2
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[-1])["key"] in reloaded


def test_roles_sharing_a_model_share_its_answers_and_skipped_roles_are_sent():
    shared, judge = echo_model("shared"), echo_model("judge")
    cache = RequestCache().cover(
        {"teacher": shared, "student": shared, "judge": judge},
        skip_roles=("judge",),
        model_keys={"teacher": "teacher-config", "student": "student-config"},
    )

    async def calls():
        with cache.in_use():
            for model in (shared, shared, judge, judge):
                await call_model(model, MESSAGES, None, GREEDY)

    asyncio.run(calls())
    assert len(shared.requests) == 1 and len(judge.requests) == 2
    assert request_key("teacher-config", MESSAGES, None, GREEDY) in cache  # keyed by the first role
