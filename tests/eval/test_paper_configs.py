"""Every config in recipes/configs/paper/ loads and validates offline, with the paper's settings."""

from __future__ import annotations

import pytest

from executor_sft.eval.eval_set import load_eval_set_config, reference_config
from executor_sft.eval.sweep import build_cells, load_sweep_config
from executor_sft.llm.config import ModelConfig
from executor_sft.testing.paths import REPO_ROOT

PAPER = REPO_ROOT / "recipes" / "configs" / "paper"
SWEEPS = ["tab1_single_vs_main_sub", "tab2_backbone_sweep", "tab3_executor_sweep"]
SWEEPS += ["tab5_executors_x_backbones", "fig3_pareto"]


def _check_model(m: ModelConfig) -> None:
    default_url = ModelConfig(model="x").base_urls
    assert m.backend == "openai" and m.base_urls != default_url, m
    assert m.api_key_env, f"{m.label()}: the key comes from api_key_env"


def _check_eval(cfg, samples: int = 4) -> None:
    assert cfg.samples == samples
    assert (cfg.pipeline.max_rounds, cfg.pipeline.max_turns, cfg.pipeline.top_k) == (4, 3, 3)
    assert cfg.single_agent.top_k == 3
    assert cfg.metrics.normalization == "squad"
    (src,) = cfg.questions
    assert src.path.endswith("test_all_clean_3869.jsonl") and src.duplicates == "keep"
    for m in cfg.models.values():
        _check_model(m)


@pytest.mark.parametrize("name", SWEEPS)
def test_paper_sweep_config_validates(monkeypatch, name):
    monkeypatch.chdir(REPO_ROOT)  # config paths are relative to the repository root
    sweep = load_sweep_config(PAPER / f"{name}.yaml")
    cells = build_cells(sweep)
    assert cells and sweep.answerer == "base"
    for cell in cells:
        cfg = cell.config
        _check_eval(cfg)
        assert cfg.questions[0].ids_file == "runs/paper/eval_set/eval_set.json"
        assert not cfg.identical_samples() and all(t > 0 for t in cfg.sampled_roles().values())
        assert {"judge"} <= set(cfg.models)
    labels = [
        m.label()
        for m in [*sweep.backbones.values(), *sweep.executors.values(), *sweep.single_agents.values()]
    ]
    assert len(labels) == len(set(labels)), "every role's model has its own label"


def test_paper_tables_cover_the_named_models(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    tab3 = load_sweep_config(PAPER / "tab3_executor_sweep.yaml")
    assert list(tab3.backbones) == ["v4-flash"]
    assert list(tab3.executors) == ["qwen3-1_7b", "sft", "search-r1", "v4-flash"]
    assert tab3.executors["qwen3-1_7b"].model == "Qwen/Qwen3-1.7B"
    tab2 = load_sweep_config(PAPER / "tab2_backbone_sweep.yaml")
    assert [e.model for e in tab2.executors.values()] == ["Qwen/Qwen3-1.7B"]
    tab5 = load_sweep_config(PAPER / "tab5_executors_x_backbones.yaml")
    assert (len(tab5.backbones), len(tab5.executors)) == (2, 3)
    tab1 = load_sweep_config(PAPER / "tab1_single_vs_main_sub.yaml")
    assert tab1.single_agents and tab1.grid()


def test_paper_eval_set_config_validates(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    config = load_eval_set_config(PAPER / "eval_set.yaml")
    ref = reference_config(config)
    _check_eval(ref, samples=1)
    assert ref.questions[0].ids_file is None  # the reference run decides the set, over all rows
    assert set(ref.models) == {"backbone", "answerer", "executor"}
