"""`Runtime.build`: the one check that every role has a model, before anything loads."""

from __future__ import annotations

import pytest

from executor_sft.errors import ConfigError
from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.request_cache import CachedChatModel
from executor_sft.metrics.judge import LLMJudge
from executor_sft.runtime import Runtime
from tests.support.doubles import ScriptedChatModel

ROLES = ["backbone", "answerer", "teacher"]


def test_a_configured_role_without_a_model_is_one_config_error_before_any_loads():
    configs = {"backbone": ChatModelConfig(model="no-such-model-is-loaded")}
    with pytest.raises(ConfigError, match=r"no model for role\(s\) \['answerer', 'teacher'\]"):
        Runtime.build(configs, None, ROLES)


def test_given_models_are_checked_too_and_a_judge_model_gets_a_judge(tmp_path):
    given = {role: ScriptedChatModel([], name=role) for role in ROLES}
    with pytest.raises(ValueError, match=r"no model for role\(s\) \['teacher'\]"):
        Runtime.build({}, None, ROLES, models={k: v for k, v in given.items() if k != "teacher"})
    judge_model = ScriptedChatModel([], name="judge")
    runtime = Runtime.build(
        {},
        None,
        ROLES,
        models=lambda: {**given, "judge": judge_model},
        judge_cache=tmp_path / "j" / "v.jsonl",
    )
    assert runtime.models["teacher"] is given["teacher"] and runtime.retriever is None
    assert isinstance(runtime.judge, LLMJudge) and runtime.judge.model is judge_model
    assert (tmp_path / "j").is_dir()


def test_configured_models_answer_through_the_request_cache(tmp_path):
    configs = {role: ChatModelConfig(model=role, base_urls="http://127.0.0.1:9/v1") for role in ROLES}
    runtime = Runtime.build(configs, None, ROLES, llm_cache=tmp_path / "cache.jsonl")
    assert all(isinstance(m, CachedChatModel) for m in runtime.models.values())
    assert runtime.judge is None
