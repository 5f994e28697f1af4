"""`Runtime.build`: the config's models (with the request cache) or the caller's, and the judge."""

from __future__ import annotations

from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.request_cache import cached_request
from executor_sft.metrics.judge import LLMJudge
from executor_sft.runtime import Runtime
from tests.support.doubles import ScriptedChatModel

ROLES = ["backbone", "answerer", "teacher"]


def test_given_models_replace_the_configs_and_a_judge_model_gets_a_judge(tmp_path):
    given = {role: ScriptedChatModel([], name=role) for role in ROLES}
    judge_model = ScriptedChatModel([], name="judge")
    runtime = Runtime.build(
        {},
        None,
        models=lambda: {**given, "judge": judge_model},
        judge_cache=tmp_path / "j" / "v.jsonl",
    )
    assert runtime.models["teacher"] is given["teacher"] and runtime.retriever is None
    assert isinstance(runtime.judge, LLMJudge) and runtime.judge.model is judge_model
    assert (tmp_path / "j").is_dir()


def test_configured_models_answer_through_the_request_cache(tmp_path):
    configs = {role: ChatModelConfig(model=role, base_urls="http://127.0.0.1:9/v1") for role in ROLES}
    runtime = Runtime.build(configs, None, llm_cache=tmp_path / "cache.jsonl")
    assert runtime.cache is not None and runtime.cache.path == tmp_path / "cache.jsonl"
    with runtime.cached_calls():
        for role, model in runtime.models.items():
            request = cached_request(model, [{"role": "user", "content": role}], None, None)
            assert request is not None and request.model_key == configs[role].identity()
    assert cached_request(runtime.models["teacher"], [], None, None) is None  # outside the block
    assert runtime.judge is None
