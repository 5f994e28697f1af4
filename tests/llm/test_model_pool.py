"""`Runtime.build`'s models: one object per distinct config, and the request cache over every role but the judge."""

from __future__ import annotations

import asyncio

from executor_sft.agents.calls import call_model
from executor_sft.llm.base import SamplingParams
from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.pool import ModelPool
from executor_sft.runtime import Runtime
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


def _say(runtime: Runtime, role: str) -> str:
    """What `role` answers through `call_model`, as the agents ask (the judge: through its `chat`)."""
    model = runtime.models[role]

    async def ask():
        with runtime.cached_calls():
            if role == "judge":
                return (await model.chat(MESSAGES, None, GREEDY)).message
            return (await call_model(model, MESSAGES, None, GREEDY)).message

    return asyncio.run(ask())["content"]


def test_roles_share_models_and_a_resumed_run_replays_its_greedy_requests(tmp_path):
    configs = {
        "backbone": ChatModelConfig(model="big"),
        "answerer": ChatModelConfig(model="big"),
        "executor": ChatModelConfig(model="small"),
        "judge": ChatModelConfig(model="big"),
    }
    built: list[str] = []
    plain = Runtime.build(configs, None, pool=_pool(built))
    assert built == ["big", "small"] and plain.cache is None
    assert plain.models["backbone"] is plain.models["answerer"] is plain.models["judge"]

    cache = tmp_path / "llm_cache.jsonl"
    first = Runtime.build(configs, None, llm_cache=cache, pool=_pool([]))
    assert (_say(first, "executor"), _say(first, "judge")) == ("small 0", "big 0")
    assert (_say(first, "executor"), _say(first, "judge")) == ("small 0", "big 1")
    again = Runtime.build(configs, None, llm_cache=cache, pool=_pool([], start=100))
    assert _say(again, "executor") == "small 0"  # replayed from the file
    assert _say(again, "judge") == "big 100"  # asked again: the judge keeps its own verdict cache
