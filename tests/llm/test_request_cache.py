"""The request cache: greedy requests are answered once, the key covers the whole request, the file survives a kill."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from executor_sft.llm.base import ChatError, SamplingParams
from executor_sft.llm.request_cache import CachedChatModel, RequestCache, cache_models, request_key
from tests.support.doubles import ScriptedChatModel

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "who?"}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


def echo_model(name: str = "m") -> ScriptedChatModel:
    """Replies with a counter, so a replayed answer is told apart from a new one."""
    n = iter(range(10_000))
    return ScriptedChatModel(name=name, default=lambda messages, tools: f"reply {next(n)}")


def run(coro):
    return asyncio.run(coro)


def test_greedy_request_is_answered_once_and_persists(tmp_path):
    path = tmp_path / "rollouts.llm_cache.jsonl"
    inner = echo_model()
    model = CachedChatModel(inner, RequestCache(path))
    first = run(model.chat(MESSAGES, TOOLS, GREEDY))
    second = run(model.chat(MESSAGES, TOOLS, GREEDY))
    assert len(inner.requests) == 1 and (model.hits, model.misses) == (1, 1)
    assert second.message == first.message and second.usage == first.usage
    assert second.latency_s == first.latency_s and second.model == first.model

    # a new process (a resumed run) reads the file and sends nothing
    inner2 = echo_model()
    again = run(CachedChatModel(inner2, RequestCache(path)).chat(MESSAGES, TOOLS, GREEDY))
    assert inner2.requests == [] and again.message == first.message


def test_hit_returns_a_copy():
    model = CachedChatModel(echo_model(), RequestCache())
    run(model.chat(MESSAGES, None, GREEDY)).message["content"] = "changed by a caller"
    assert run(model.chat(MESSAGES, None, GREEDY)).message["content"] == "reply 0"


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
def test_every_part_of_the_request_is_in_the_key(change):
    base = {"model_key": "m", "messages": MESSAGES, "tools": TOOLS, "sampling": GREEDY}
    changed = {**base, **change}
    assert request_key(**changed) != request_key(**base)
    inner = echo_model()
    cache = RequestCache()
    run(CachedChatModel(inner, cache, model_key="m").chat(MESSAGES, TOOLS, GREEDY))
    model = CachedChatModel(inner, cache, model_key=changed["model_key"])
    run(model.chat(changed["messages"], changed["tools"], changed["sampling"]))
    assert len(inner.requests) == 2 and model.misses == 1


def test_key_ignores_dict_order_and_uses_the_models_defaults():
    reordered = [{"content": m["content"], "role": m["role"]} for m in MESSAGES]
    assert request_key("m", reordered, TOOLS, GREEDY) == request_key("m", MESSAGES, TOOLS, GREEDY)
    inner = echo_model()
    inner.sampling = GREEDY  # a backend's own defaults apply when a call passes none
    model = CachedChatModel(inner, RequestCache())
    run(model.chat(MESSAGES, TOOLS, None))
    run(model.chat(MESSAGES, TOOLS, GREEDY))
    assert len(inner.requests) == 1


def test_sampled_and_multi_completion_requests_are_not_cached(tmp_path):
    path = tmp_path / "cache.jsonl"
    inner = echo_model()
    model = CachedChatModel(inner, RequestCache(path))
    for sampling in (
        SamplingParams(temperature=0.7),
        dataclasses.replace(GREEDY, extra_body={"n": 2}),
        dataclasses.replace(GREEDY, extra_body={"best_of": 3}),
    ):
        run(model.chat(MESSAGES, None, sampling))
        run(model.chat(MESSAGES, None, sampling))
    assert len(inner.requests) == 6 and model.hits == 0
    assert not path.exists()


def test_failures_are_not_cached():
    calls = []

    class Flaky:
        name = "flaky"

        async def chat(self, messages, tools=None, sampling=None):
            calls.append(1)
            if len(calls) == 1:
                raise ChatError("503")
            return await echo_model().chat(messages, tools, sampling)

    model = CachedChatModel(Flaky(), RequestCache())
    with pytest.raises(ChatError):
        run(model.chat(MESSAGES, None, GREEDY))
    run(model.chat(MESSAGES, None, GREEDY))
    run(model.chat(MESSAGES, None, GREEDY))
    assert len(calls) == 2


def test_identical_requests_in_flight_are_sent_once():
    inner = ScriptedChatModel(name="slow", latency_s=0.05, default="done")
    model = CachedChatModel(inner, RequestCache())

    async def both():
        return await asyncio.gather(*(model.chat(MESSAGES, None, GREEDY) for _ in range(5)))

    results = run(both())
    assert len(inner.requests) == 1 and {r.message["content"] for r in results} == {"done"}


def test_torn_last_line_is_skipped_and_the_next_answer_lands_on_its_own_line(tmp_path):
    path = tmp_path / "cache.jsonl"
    run(CachedChatModel(echo_model(), RequestCache(path)).chat(MESSAGES, None, GREEDY))
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"key": "abc", "result": {"mess')  # a writer killed mid-line
    cache = RequestCache(path)
    assert len(cache) == 1
    other = [{"role": "user", "content": "and then?"}]
    run(CachedChatModel(echo_model(), cache).chat(other, None, GREEDY))
    reloaded = RequestCache(path)
    assert len(reloaded) == 2
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[-1])["key"] in reloaded


def test_wrapper_passes_other_attributes_and_shares_per_model():
    inner = echo_model("shared")
    inner.sampling = GREEDY
    judge = echo_model("judge")
    wrapped = cache_models(
        {"teacher": inner, "student": inner, "judge": judge}, RequestCache(), skip_roles=("judge",)
    )
    assert wrapped["teacher"] is wrapped["student"] and wrapped["judge"] is judge
    assert wrapped["teacher"].name == "shared" and wrapped["teacher"].sampling is GREEDY
    run(wrapped["student"].chat(MESSAGES, None, GREEDY))
    run(wrapped["teacher"].chat(MESSAGES, None, GREEDY))
    assert len(inner.requests) == 1
