"""`models.<role>` sampling fields and `pipeline.roles.<role>.sampling` merge: written keys of the role win."""

from __future__ import annotations

import pytest

from executor_sft.agents.config import PipelineConfig
from executor_sft.eval.config import EvalConfig
from executor_sft.llm.base import SamplingParams
from executor_sft.rollout.config import CollectConfig

ROLES = ("backbone", "answerer", "teacher", "student")


def collect_config(models: dict, roles: dict) -> CollectConfig:
    return CollectConfig.model_validate(
        {
            "questions": {"path": "q.jsonl"},
            "retriever": {"index": "unused"},
            "models": {r: {"model": r, **models.get(r, {})} for r in ROLES},
            "pipeline": {"roles": roles},
        }
    )


def test_role_sampling_keys_override_the_models_and_the_rest_is_kept():
    cfg = collect_config(
        {"student": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 300, "seed": 5}},
        {"student": {"sampling": {"max_tokens": 2048, "enable_thinking": False}}},
    )
    got = cfg.pipeline.sampling_for("student")
    assert (got.temperature, got.top_p, got.seed) == (0.7, 0.9, 5)  # from models.student
    assert (got.max_tokens, got.enable_thinking) == (2048, False)  # from pipeline.roles.student
    assert cfg.pipeline.executor_settings("student").sampling == got


def test_a_key_written_under_the_role_wins_even_at_its_default_value():
    cfg = collect_config(
        {"teacher": {"temperature": 0.7}, "backbone": {"temperature": 0.5, "max_tokens": 99}},
        {"teacher": {"sampling": {"temperature": 0.0}}, "backbone": {"protocol": "native"}},
    )
    assert cfg.pipeline.sampling_for("teacher").temperature == 0.0
    assert cfg.pipeline.sampling_for("backbone") is None  # no role sampling: the model's defaults apply
    # re-validating a dumped config (what parallel workers do) gives the same settings
    again = CollectConfig.model_validate_json(cfg.model_dump_json())
    assert again.pipeline.sampling_for("teacher") == cfg.pipeline.sampling_for("teacher")


def test_eval_config_merges_too():
    cfg = EvalConfig.model_validate(
        {
            "output_dir": "out",
            "questions": [{"path": "q.jsonl"}],
            "retriever": {"index": "unused"},
            "models": {r: {"model": r, "temperature": 0.6} for r in ("backbone", "answerer", "executor")},
            "pipeline": {
                "executor_roles": ["executor"],
                "driver": "executor",
                "roles": {"executor": {"sampling": {"max_tokens": 512}}},
            },
        }
    )
    assert cfg.pipeline.sampling_for("executor") == SamplingParams(temperature=0.6, max_tokens=512)
    assert cfg.sampled_roles()["executor"] == 0.6


@pytest.mark.parametrize("given", [SamplingParams(max_tokens=7), None])
def test_a_sampling_object_still_replaces_the_defaults(given):
    pipeline = PipelineConfig(roles={"teacher": {"sampling": given}} if given else {})
    merged = pipeline.with_model_sampling({"teacher": SamplingParams(temperature=0.9)})
    assert merged.sampling_for("teacher") == given


def test_single_agent_sampling_merges_over_its_model():
    cfg = EvalConfig.model_validate(
        {
            "output_dir": "out",
            "mode": "single_agent",
            "questions": [{"path": "q.jsonl"}],
            "retriever": {"index": "unused"},
            "models": {"single_agent": {"model": "m", "temperature": 0.6, "top_p": 0.95, "seed": 3}},
            "single_agent": {"sampling": {"max_tokens": 1024}},
        }
    )
    got = cfg.single_agent.sampling
    assert (got.temperature, got.top_p, got.seed, got.max_tokens) == (0.6, 0.95, 3, 1024)
    assert cfg.sampled_roles() == {"single_agent": 0.6}  # not the SamplingParams default 0.0
    assert cfg.single_agent.executor_settings(cfg.pipeline.prompts).sampling == got
    again = EvalConfig.model_validate_json(cfg.model_dump_json())
    assert again.single_agent.sampling == got
