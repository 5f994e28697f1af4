"""Every shipped collection config validates; the reference and offline configs say what they claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor_sft.errors import ConfigError
from executor_sft.llm.pool import ModelPool
from executor_sft.rollout import CollectConfig, load_collect_config, select_questions

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "recipes" / "configs").glob("collect_*.yaml"))


def test_the_documented_configs_exist():
    assert {"collect_paper_reference.yaml", "collect_minibench_offline.yaml"} <= {p.name for p in CONFIGS}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_validates(path):
    config = load_collect_config(path)
    assert set(config.required_roles()) <= set(config.models)
    for role in config.pipeline.executor_roles:
        turns, searches = config.pipeline.budget(role)
        assert searches is None or searches <= turns - 1


def test_every_role_has_a_model_or_the_config_says_which_do_not(tmp_path):
    """The one check that every role has a model: the config's validator, before anything loads.
    A config built in code may name no models (its caller hands them to `collect`); a file may not."""
    base = {"questions": {"path": "q.jsonl"}, "retriever": {"index": "i"}}
    assert CollectConfig.model_validate(base).models == {}
    with pytest.raises(ValueError, match=r"models: no model for role\(s\) \['answerer', 'student'\]; got"):
        CollectConfig.model_validate({**base, "models": {r: {"model": r} for r in ("backbone", "teacher")}})
    path = tmp_path / "collect.yaml"
    path.write_text("questions: {path: q.jsonl}\nretriever: {index: i}\n")
    with pytest.raises(ConfigError) as err:
        load_collect_config(path)
    assert str(err.value).startswith(f"{path}: ")
    assert "no model for role(s) ['backbone', 'answerer', 'teacher', 'student']; got []" in str(err.value)


def test_paper_reference_setup():
    path = REPO / "recipes" / "configs" / "collect_paper_reference.yaml"
    config = load_collect_config(path)
    p = config.pipeline
    assert (p.max_rounds, p.max_parallel, p.max_turns, p.top_k, config.retriever.k) == (4, 3, 3, 3, 3)
    assert (p.executor_roles, p.driver) == (["teacher", "student"], "teacher")
    assert config.retriever.url is not None  # a Search-R1 wire-format server
    for role in ("backbone", "teacher"):
        assert (
            config.models[role].backend == "openai" and config.models[role].api_key_env == "DEEPSEEK_API_KEY"
        )
    student = config.models["student"]
    assert "Qwen3-1.7B" in student.model and student.backend in ("openai", "vllm")
    assert p.role("student").sampling.enable_thinking is False  # what the endpoint receives
    assert "Qwen3-32B" in config.models["answerer"].model and "judge" in config.models
    assert (config.counterfactual.min_searches, config.counterfactual.max_searches) == (2, 1)
    assert "sk-" not in path.read_text()  # a key name, never a key


@pytest.mark.shared_data
def test_offline_config_selects_minibench_train_questions(minibench_questions_path, monkeypatch):
    monkeypatch.chdir(REPO)  # config paths are relative to the repository root, where recipes run
    config = load_collect_config(REPO / "recipes" / "configs" / "collect_minibench_offline.yaml")
    assert Path(config.questions.path).resolve() == minibench_questions_path.resolve()
    questions = select_questions(config)
    assert len(questions) == config.questions.limit
    assert all(q.split == "train" and q.dataset == "musique" for q in questions)
    assert all(q.model_extra["decomposition"] for q in questions)  # what the oracle backbone dispatches
    backbone = config.models.pop("backbone")
    assert backbone.backend == "oracle" and backbone.questions == config.questions.path
    assert {m.model for m in config.models.values()} <= {"offline:smollm2", "offline:tiny-qwen3"}
    assert config.retriever.index and config.retriever.kind == "bm25"


def test_bad_config_names_the_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "questions: {path: q.jsonl}\nretriever: {index: idx}\npipeline: {max_turns: 0}\nconcurrencyy: 3\n"
    )
    with pytest.raises(ValueError) as err:
        load_collect_config(path)
    message = str(err.value)
    assert str(path) in message and "pipeline.max_turns" in message and "concurrencyy" in message


def test_identical_model_settings_share_one_model(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text(
        "questions: {path: q.jsonl}\nretriever: {index: idx}\nmodels:\n"
        "  backbone: {model: big, base_urls: 'http://127.0.0.1:9/v1'}\n"
        "  teacher: {model: big, base_urls: 'http://127.0.0.1:9/v1'}\n"
        "  student: {model: small, base_urls: 'http://127.0.0.1:9/v1'}\n"
        "  answerer: {model: big, base_urls: 'http://127.0.0.1:9/v1'}\n"
    )
    config = load_collect_config(path)
    models = ModelPool().build(config.models)
    assert models["backbone"] is models["teacher"] is models["answerer"]
    assert models["student"] is not models["teacher"]
