"""One config class per backend: a role's `backend` picks the fields it may have, and the
request-cache identity is that backend's own config less what cannot change an answer."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from executor_sft.configfile import load_config
from executor_sft.llm import (
    BACKENDS,
    ChatModelConfig,
    OpenAIConfig,
    OracleConfig,
    TransformersConfig,
    VLLMConfig,
    build_chat_model,
)
from executor_sft.llm.oracle import OracleBackbone
from executor_sft.rollout.config import CollectConfig
from executor_sft.schema import Question


def test_a_field_of_another_backend_is_an_error_naming_its_backend():
    with pytest.raises(ValidationError) as caught:
        ChatModelConfig(backend="openai", model="m", dtype="bfloat16", device="cuda:3")
    assert [(e["loc"], e["msg"]) for e in caught.value.errors()] == [
        (("dtype",), "not a field of backend 'openai'; it belongs to backend 'transformers'"),
        (("device",), "not a field of backend 'openai'; it belongs to backend 'transformers'"),
    ]
    with pytest.raises(
        ValidationError, match="not a field of backend 'transformers'; it belongs to backend 'openai'"
    ):
        ChatModelConfig.model_validate({"backend": "transformers", "model": "m", "base_urls": "http://h/v1"})
    with pytest.raises(ValidationError, match="did you mean 'temperature'"):
        ChatModelConfig.model_validate({"model": "m", "temprature": 0.5})
    with pytest.raises(ValidationError, match=r"unknown model backend 'vlm': did you mean 'vllm'\?"):
        ChatModelConfig.model_validate({"backend": "vlm", "model": "m"})
    with pytest.raises(ValidationError, match="configured by VLLMConfig, not OpenAIConfig"):
        OpenAIConfig(backend="vllm", model="m")


def test_each_backend_gets_its_own_class(tmp_path):
    assert type(ChatModelConfig(model="m")) is OpenAIConfig
    assert type(ChatModelConfig(backend="vllm", model="m")) is VLLMConfig
    cfg = ChatModelConfig.model_validate(
        {"backend": "transformers", "model": "offline:tiny-qwen3", "dtype": "bfloat16"}
    )
    assert isinstance(cfg, TransformersConfig) and cfg.dtype == "bfloat16"
    questions = tmp_path / "q.jsonl"
    question = Question(id="q1", question="Which band released Counterparts?", golden_answers=["Rush"])
    questions.write_text(question.to_json() + "\n", encoding="utf-8")
    oracle = ChatModelConfig.model_validate({"backend": "oracle", "questions": str(questions)})
    assert isinstance(oracle, OracleConfig) and oracle.mode == "report"
    assert isinstance(build_chat_model(oracle), OracleBackbone)
    assert set(BACKENDS.names()) >= {"openai", "transformers", "vllm", "oracle"}


def test_the_error_surfaces_through_load_config_as_one_line(tmp_path):
    path = tmp_path / "collect.yaml"
    path.write_text(
        "questions: {path: q.jsonl}\nretriever: {index: idx}\n"
        "models:\n  teacher: {backend: openai, model: m, dtype: bfloat16}\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError) as caught:
        load_config(CollectConfig, path)
    assert str(caught.value) == (
        f"{path}: invalid config: field 'models.teacher.dtype': not a field of backend 'openai'; "
        "it belongs to backend 'transformers'"
    )


def test_a_config_keeps_each_backends_fields_through_json():
    """Collection workers get their config as JSON: every backend's own fields must survive it."""
    config = CollectConfig.model_validate(
        {
            "questions": {"path": "q.jsonl"},
            "retriever": {"index": "idx"},
            "models": {
                "backbone": {"model": "b"},
                "answerer": {"model": "a"},
                "teacher": {"backend": "transformers", "model": "t", "dtype": "bfloat16", "device": "cuda:3"},
                "student": {"backend": "openai", "model": "s", "base_urls": "http://h/v1", "max_retries": 1},
            },
        }
    )
    again = CollectConfig.model_validate_json(config.model_dump_json())
    assert again.models == config.models
    assert type(again.models["teacher"]) is TransformersConfig and again.models["teacher"].device == "cuda:3"


@pytest.mark.parametrize(
    ("base", "neutral", "changes"),
    [
        (
            {"model": "m"},
            {"base_urls": "http://other/v1", "api_key_env": "K", "max_concurrency": 1, "timeout_s": 5.0}
            | {
                "max_retries": 0,
                "backoff_base_s": 0.0,
                "backoff_max_s": 1.0,
                "temperature": 0.5,
                "max_tokens": 3,
            },
            {"model": "n", "name": "label", "extra_body": {"top_k": 20}, "pass_enable_thinking": False}
            | {"max_tokens_field": "max_completion_tokens", "tokenizer": "offline:tiny-qwen3"},
        ),
        (
            {"backend": "transformers", "model": "m"},
            {"device": "cuda:1", "max_batch_size": 1, "seed": 3, "stop": ["x"], "enable_thinking": True},
            {"dtype": "bfloat16", "chat_template": "chatml_tools", "tokenizer": "t"},
        ),
        ({"backend": "vllm", "model": "m"}, {"top_p": 0.5}, {"engine_kwargs": {"max_model_len": 4096}}),
        ({"backend": "oracle", "questions": "a.jsonl"}, {}, {"questions": "b.jsonl", "mode": "gold"}),
    ],
)
def test_identity_is_the_backends_own_config_less_what_cannot_change_an_answer(base, neutral, changes):
    identity = ChatModelConfig.model_validate(base).identity()
    for field, value in neutral.items():
        assert ChatModelConfig.model_validate({**base, field: value}).identity() == identity, field
    for field, value in changes.items():
        assert ChatModelConfig.model_validate({**base, field: value}).identity() != identity, field
