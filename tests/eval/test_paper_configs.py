"""Every paper config, checked against a table written from the paper's own text.

`PAPER_TEXT` is read off the paper (section / table cited per entry), not off the configs: the
rows of each table, the model each row names, the budgets, the sampling, the answerer, the
judge, the retriever and the evaluation set. Each config in recipes/configs/paper/ (and the
collection config behind Tab. 4) must say the same; where the paper names no model, the
config must say "SET-THIS".
"""

from __future__ import annotations

import json

import pytest

from executor_sft.eval.eval_set import load_eval_set_config, reference_config
from executor_sft.eval.sweep import build_cells, load_sweep_config
from executor_sft.rollout import load_collect_config
from tests.support.paths import REPO_ROOT

PAPER = REPO_ROOT / "recipes" / "configs" / "paper"

QWEN3 = ["Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B"]
V4_FLASH = "deepseek-ai/DeepSeek-V4-Flash"
SCALE = [*QWEN3, V4_FLASH]  # Tab. 1 and Tab. 2 rows, in the paper's order
UNNAMED = None  # the paper names the model but gives no hub id (or does not say which): "SET-THIS"

PAPER_TEXT = {
    "T": 4,  # Sec. 4.1: "cap the outer delegation loop at T=4 rounds"
    "K": 3,  # Sec. 4.1: "each inner execution loop at K=3 assistant turns"
    "samples": 4,  # Sec. 4.1: mean@4
    "answerer": "Qwen/Qwen3-32B",  # Sec. 4.1
    "judge": V4_FLASH,  # Sec. 4.1, App. B
    "embedding": "Qwen/Qwen3-Embedding-8B",  # Sec. 4.1, served through FAISS
    "eval_rows": {"2wikimultihopqa": 991, "hotpotqa": 963, "musique": 988, "popqa": 818, "bamboogle": 109},
    # Tab. 1: each model as a single agent and as both roles of the main-sub system
    "tab1": SCALE,
    # Tab. 2: backbones, the executor fixed to Qwen3-1.7B
    "tab2": [(b, "Qwen/Qwen3-1.7B") for b in SCALE],
    # Tab. 3: executors under DeepSeek-V4-Flash (Qwen3-8B-SearchR1 and Qwen3-1.7B-SFT: no hub id)
    "tab3": [(V4_FLASH, e) for e in [*SCALE, UNNAMED, UNNAMED]],
    # Tab. 5: {Qwen3-1.7B, Qwen3-1.7B-SFT, DeepSeek-V4-Flash} under {DeepSeek-V4-Flash, GLM-5.1}
    "tab5": [(b, e) for b in (V4_FLASH, "zai-org/GLM-5.1") for e in ("Qwen/Qwen3-1.7B", UNNAMED, V4_FLASH)],
    # Fig. 2: decomposition (executor Qwen3-1.7B) and execution (backbone DeepSeek-V4-Flash) sweeps
    "fig2_decomposition": [(b, "Qwen/Qwen3-1.7B") for b in SCALE],
    "fig2_execution": [(V4_FLASH, e) for e in SCALE],
    # Tab. 6 (App. A): "DeepSeek" (unnamed) and Qwen3-32B without retrieval
    "tab6": [UNNAMED, "Qwen/Qwen3-32B"],
    # Tab. 4 / Sec. 3.4: the collection run
    "collection": {
        "backbone": V4_FLASH,
        "teacher": "deepseek-ai/DeepSeek-V4-Pro",
        "student": "Qwen/Qwen3-1.7B",
        "answerer": "Qwen/Qwen3-32B",
        "judge": V4_FLASH,
        "training_questions": 3000,  # App. D
    },
}


def _id(model: str) -> str | None:
    """A config's model id as the table above writes it (placeholders are UNNAMED)."""
    return UNNAMED if model.startswith("SET-THIS") else model


def _check_base(cfg) -> None:
    """What every evaluation cell shares: budgets, samples, answerer, judge, retriever, questions."""
    assert (cfg.pipeline.max_rounds, cfg.pipeline.max_turns) == (PAPER_TEXT["T"], PAPER_TEXT["K"])
    assert cfg.samples == PAPER_TEXT["samples"]
    assert cfg.models["judge"].model == PAPER_TEXT["judge"]
    if cfg.mode == "pipeline":
        assert cfg.models["answerer"].model == PAPER_TEXT["answerer"]
    assert not cfg.identical_samples() and all(t > 0 for t in cfg.sampled_roles().values())
    assert cfg.retriever.kind == "dense"
    assert cfg.retriever.options["model"] == PAPER_TEXT["embedding"]
    (src,) = cfg.questions
    assert src.path.endswith("test_all_clean_3869.jsonl") and src.duplicates == "keep"
    assert src.ids_file is None  # the shipped 3,869 already are Tab. 8's "Remaining": no second cut


def _sweep(name: str, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # config paths are relative to the repository root
    sweep = load_sweep_config(PAPER / f"{name}.yaml")
    cells = build_cells(sweep)
    for cell in cells:
        _check_base(cell.config)
    assert sweep.answerer == "base" and sweep.cells_dir == "runs/paper/cells"
    return sweep, cells


def _pairs(cells) -> list[tuple[str | None, str | None]]:
    out = []
    for c in cells:
        if c.kind == "pipeline":
            m = c.config.models
            out.append((_id(m["backbone"].model), _id(m["executor"].model)))
    return out


def test_tab1_six_models_single_agent_and_the_diagonal(monkeypatch):
    sweep, cells = _sweep("tab1_single_vs_main_sub", monkeypatch)
    assert _pairs(cells) == [(m, m) for m in PAPER_TEXT["tab1"]]  # the diagonal, not a 6 x 6 grid
    single = [c.config.models["single_agent"].model for c in cells if c.kind == "single_agent"]
    assert single == PAPER_TEXT["tab1"]
    assert sweep.per_dataset == "judge"


@pytest.mark.parametrize("table", ["tab2", "tab3", "tab5"])
def test_tables_2_3_5_have_every_row(monkeypatch, table):
    name = {
        "tab2": "tab2_backbone_sweep",
        "tab3": "tab3_executor_sweep",
        "tab5": "tab5_executors_x_backbones",
    }[table]
    sweep, cells = _sweep(name, monkeypatch)
    assert _pairs(cells) == PAPER_TEXT[table]
    assert len(cells) == {"tab2": 6, "tab3": 8, "tab5": 6}[table]
    assert sweep.per_dataset == "judge"  # the paper's per-dataset columns are the LLM judge


def test_tab3_unnamed_executors_are_searchr1_and_the_sft_checkpoint(monkeypatch):
    sweep, _ = _sweep("tab3_executor_sweep", monkeypatch)
    assert list(sweep.executors)[-2:] == ["qwen3-8b-searchr1", "qwen3-1_7b-sft"]


def test_fig2_both_sweeps_on_one_plot(monkeypatch):
    sweep, cells = _sweep("fig2_role_sensitivity", monkeypatch)
    curves = sweep.role_curves
    model = {k: _id(m.model) for k, m in {**sweep.backbones, **sweep.executors}.items()}
    assert [(model[b], model[e]) for b, e in curves.decomposition()] == PAPER_TEXT["fig2_decomposition"]
    assert [(model[b], model[e]) for b, e in curves.execution()] == PAPER_TEXT["fig2_execution"]
    assert len(cells) == 11  # the two sweeps share the (DeepSeek-V4-Flash, Qwen3-1.7B) cell


def test_fig3_is_tab3s_cells(monkeypatch):
    _, fig3 = _sweep("fig3_pareto", monkeypatch)
    _, tab3 = _sweep("tab3_executor_sweep", monkeypatch)
    assert [c.name for c in fig3] == [c.name for c in tab3]


def test_tab6_the_answerer_alone_without_retrieval(monkeypatch):
    sweep, cells = _sweep("tab6_no_retrieval", monkeypatch)
    assert [c.kind for c in cells] == ["no_retrieval", "no_retrieval"]
    assert [_id(c.config.models["answerer"].model) for c in cells] == PAPER_TEXT["tab6"]
    assert not cells[0].config.needs_retriever


def test_one_model_key_is_one_model_in_every_table(monkeypatch):
    """Cells share `cells_dir` by name, so a key must mean the same model (same config) everywhere."""
    monkeypatch.chdir(REPO_ROOT)
    seen: dict[str, str] = {}
    for path in sorted(PAPER.glob("*.yaml")):
        if path.name in ("eval_base.yaml", "eval_set.yaml"):
            continue
        sweep = load_sweep_config(path)
        for key, m in {**sweep.backbones, **sweep.executors, **sweep.single_agents}.items():
            dumped = m.model_dump_json()
            assert seen.setdefault(key, dumped) == dumped, f"{path.name}: {key} differs from another table"


def test_the_evaluation_set_is_the_shipped_3869(seed_splits_path):
    rows = [json.loads(line) for line in (seed_splits_path / "test_all_clean_3869.jsonl").open()]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["dataset"]] = counts.get(row["dataset"], 0) + 1
    assert counts == PAPER_TEXT["eval_rows"] and len(rows) == 3869


def test_eval_set_step_is_for_the_originals_only(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    config = load_eval_set_config(PAPER / "eval_set.yaml")
    ref = reference_config(config)
    (src,) = ref.questions
    assert "3869" not in src.path and src.ids_file is None  # never re-cuts the shipped 3,869
    assert set(ref.models) == {"backbone", "answerer", "executor"}
    assert ref.samples == 1


def test_collection_config_behind_tab4():
    config = load_collect_config(REPO_ROOT / "recipes" / "configs" / "collect_paper_reference.yaml")
    models = {role: m.model for role, m in config.models.items()}
    want = PAPER_TEXT["collection"]
    assert {r: models[r] for r in ("backbone", "teacher", "student", "answerer", "judge")} == {
        r: want[r] for r in ("backbone", "teacher", "student", "answerer", "judge")
    }
    assert config.questions.path.endswith("train_mixed3000.jsonl")
    assert (config.pipeline.max_rounds, config.pipeline.max_turns) == (PAPER_TEXT["T"], PAPER_TEXT["K"])
    assert (config.counterfactual.min_searches, config.counterfactual.max_searches) == (2, 1)


def test_collection_questions_are_the_3000(seed_splits_path):
    with (seed_splits_path / "train_mixed3000.jsonl").open() as f:
        assert sum(1 for _ in f) == PAPER_TEXT["collection"]["training_questions"]
