"""`build_models`: one object per distinct config, and the request cache around every role but the judge."""

from __future__ import annotations

import asyncio

from executor_sft.llm.base import SamplingParams
from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.pool import ModelPool, build_models
from executor_sft.llm.request_cache import CachedChatModel
from tests.support.doubles import ScriptedChatModel

GREEDY = SamplingParams(temperature=0.0, max_tokens=16)
MESSAGES = [{"role": "user", "content": "who?"}]


def _pool(built: list[str], start: int = 0) -> ModelPool:
    """Doubles that count their replies from `start`, so a replayed answer is told apart from a new one."""

    def factory(cfg: ChatModelConfig) -> ScriptedChatModel:
        built.append(cfg.model)
        n = iter(range(start, start + 1000))
        return ScriptedChatModel(name=cfg.model, default=lambda messages, tools: f"{cfg.model} {next(n)}")

    return ModelPool(factory)


def _say(model) -> str:
    return asyncio.run(model.chat(MESSAGES, None, GREEDY)).message["content"]


def test_roles_share_models_and_a_resumed_run_replays_its_greedy_requests(tmp_path):
    configs = {
        "backbone": ChatModelConfig(model="big"),
        "answerer": ChatModelConfig(model="big"),
        "executor": ChatModelConfig(model="small"),
        "judge": ChatModelConfig(model="big"),
    }
    built: list[str] = []
    plain = build_models(configs, pool=_pool(built))
    assert built == ["big", "small"] and plain["backbone"] is plain["answerer"] is plain["judge"]
    assert not any(isinstance(m, CachedChatModel) for m in plain.values())

    cache = tmp_path / "llm_cache.jsonl"
    first = build_models(configs, cache_file=cache, pool=_pool([]))
    assert first["backbone"] is first["answerer"] and isinstance(first["executor"], CachedChatModel)
    assert not isinstance(first["judge"], CachedChatModel)  # it keeps its own verdict cache
    assert (_say(first["executor"]), _say(first["judge"])) == ("small 0", "big 0")
    again = build_models(configs, cache_file=cache, pool=_pool([], start=100))
    assert _say(again["executor"]) == "small 0"  # replayed from the file
    assert _say(again["judge"]) == "big 100"  # asked again: the judge keeps its own verdict cache
