"""A 2x2 (backbone, executor) sweep plus a single-agent baseline with scripted doubles over real BM25."""

from __future__ import annotations

import json

import pytest
from eval_helpers import scripted, scripted_factory

from executor_sft.eval import QuestionSource, pareto_front, run_sweep, select_questions
from executor_sft.eval.plots import Point
from executor_sft.eval.sweep import SweepConfig
from executor_sft.llm import ModelPool


def _sweep(tmp_path, questions_path, index_dir) -> SweepConfig:
    base = {
        "questions": [{"path": str(questions_path), "split": "dev", "limit": 1}],
        "samples": 1,
        "concurrency": 3,
        "models": {"answerer": scripted("answerer"), "judge": scripted("judge")},
        "pipeline": {"executor_roles": ["executor"], "driver": "executor", "max_turns": 3},
        "single_agent": {"max_turns": 3},
        "retriever": {"index": str(index_dir), "k": 3},
    }
    return SweepConfig.model_validate(
        {
            "name": "scripted-sweep",
            "output_dir": str(tmp_path / "sweep"),
            "base": base,
            "backbones": {"narrow": scripted("bb-narrow"), "wide": scripted("bb-wide")},
            "executors": {"quick": scripted("ex-quick"), "thorough": scripted("ex-thorough")},
            "single_agents": {"agent": scripted("agent")},
        }
    )


@pytest.mark.slow
def test_sweep_grid_table_plots_and_cache(
    tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25
):
    questions = select_questions([QuestionSource(path=str(minibench_questions_path), split="dev", limit=1)])
    gold = {q.question: q.golden_answers[0] for q in questions}
    built: list[str] = []
    sweep = _sweep(tmp_path, minibench_questions_path, minibench_bm25_dir)
    result = run_sweep(
        sweep, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
    )
    names = [c.name for c, _ in result.cells]
    assert names == ["narrow+quick", "narrow+thorough", "wide+quick", "wide+thorough", "single:agent"]
    assert sorted(set(built)) == sorted(
        f"scripted:{n}"
        for n in ("answerer", "judge", "bb-narrow", "bb-wide", "ex-quick", "ex-thorough", "agent")
    )
    assert len(built) == 7  # each model built once and shared across cells
    res = {c.name: r for c, r in result.cells}
    # Only the thorough executor (two searches) reports the gold answer.
    assert res["narrow+thorough"].average["em"] == 1.0 and res["wide+thorough"].average["em"] == 1.0
    assert res["narrow+quick"].average["em"] == 0.0 and res["narrow+quick"].average["judge"] == 0.0
    assert res["single:agent"].average["em"] == 1.0
    tok = {n: r.average["subagent_tokens"] for n, r in res.items()}
    assert tok["narrow+quick"] < tok["narrow+thorough"] < tok["wide+thorough"]
    assert tok["narrow+quick"] < tok["wide+quick"]
    assert (
        res["wide+thorough"].average["search_2plus"] == 1.0 and res["narrow+quick"].average["search_1"] == 1.0
    )

    files = result.files
    assert set(files) == {"json", "markdown", "pareto", "pareto_latency", "capacity"}
    assert all(p.stat().st_size > 5_000 for k, p in files.items() if k != "json" and k != "markdown")
    md = files["markdown"].read_text()
    timed = res["wide+thorough"].average
    assert 0 < timed["t_search_p50"] <= timed["t_search_p95"] and timed["research_p50"] > 0
    assert "T_search P50 ms" in md and "with up to" in md
    assert "| narrow+quick | narrow | quick | 0.0 |" in md and "| single:agent |  | agent | 100.0 |" in md
    data = json.loads(files["json"].read_text())
    assert [c["name"] for c in data["cells"]] == names
    # The plotted frontier: cheapest correct system and the cheapest system overall.
    pts = [
        Point(c["name"], c["results"]["average"]["subagent_tokens"], c["results"]["average"]["judge"])
        for c in data["cells"]
    ]
    front = {p.label for p in pareto_front(pts)}
    assert "narrow+quick" in front and "wide+thorough" not in front

    # Second run: every cell is cached; no model is built.
    built.clear()
    again = run_sweep(
        sweep, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
    )
    assert (again.ran, len(again.cached), built) == ([], 5, [])
    assert again.cells[1][1].average == pytest.approx(result.cells[1][1].average)
    # Changing a cell's system is refused rather than mixing two systems' episodes in one cell.
    sweep.executors["quick"] = sweep.executors["quick"].model_copy(update={"name": "quick-v2"})
    with pytest.raises(ValueError, match="different system"):
        run_sweep(
            sweep, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
        )


def test_role_curves_must_be_cells_of_the_sweep(tmp_path):
    """Fig. 2's two curves over keys that name a backbone and an executor each."""
    model = scripted("bb-wide")
    data = {
        "output_dir": str(tmp_path / "sweep"),
        "base": {},
        "backbones": {"small": model, "large": model},
        "executors": {"small": model, "large": model},
        "role_curves": {"scale": ["small", "large"], "fixed_executor": "small", "fixed_backbone": "large"},
    }
    three = [("small", "small"), ("large", "small"), ("large", "large")]
    curves = SweepConfig.model_validate({**data, "cells": three}).role_curves
    assert curves.decomposition() == [("small", "small"), ("large", "small")]
    assert curves.execution() == [("large", "small"), ("large", "large")]
    with pytest.raises(ValueError, match=r"role_curves: cells not in the sweep: \[\('large', 'large'\)\]"):
        SweepConfig.model_validate({**data, "cells": three[:2]})


@pytest.mark.slow
def test_no_retrieval_cells_and_the_judge_per_dataset(
    tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25
):
    """Two no-retrieval cells beside a pipeline cell in a shared cells_dir; sweep.md shows the judge."""
    questions = select_questions([QuestionSource(path=str(minibench_questions_path), split="dev", limit=1)])
    gold = {q.question: q.golden_answers[0] for q in questions}
    data = _sweep(tmp_path, minibench_questions_path, minibench_bm25_dir).model_dump()
    data.update(
        cells=[("wide", "thorough")],
        single_agents={},
        no_retrieval={"memory": scripted("answerer")},
        per_dataset="judge",
        cells_dir=str(tmp_path / "shared-cells"),
    )
    sweep = SweepConfig.model_validate(data)
    built: list[str] = []
    result = run_sweep(
        sweep, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
    )
    names = [c.name for c, _ in result.cells]
    assert names == ["wide+thorough", "no-retrieval:memory"]
    assert sorted(p.name for p in (tmp_path / "shared-cells").iterdir()) == [
        "no-retrieval_memory",
        "wide+thorough",
    ]
    memory = dict((c.name, r) for c, r in result.cells)["no-retrieval:memory"]
    assert memory.meta["mode"] == "no_retrieval" and memory.average["no_subquery_share"] == 1.0
    assert memory.average["judge"] == 0.0  # nothing to answer from: the scripted answerer says "unknown"
    episodes = [
        json.loads(line)
        for line in (tmp_path / "shared-cells" / "no-retrieval_memory" / "episodes.jsonl").open()
    ]
    assert all(e["runs"] == [] and e["rounds"] == [] for e in episodes)
    assert "Findings: none" in episodes[0]["answerer"]["messages"][1]["content"]
    table = (tmp_path / "sweep" / "sweep.md").read_text()
    assert (
        "| judge " + sorted(memory.datasets)[0] in table and "| EM " + sorted(memory.datasets)[0] not in table
    )
    # a second sweep sharing the cells directory loads the cell instead of running it
    again = run_sweep(
        SweepConfig.model_validate({**data, "output_dir": str(tmp_path / "other")}),
        pool=ModelPool(scripted_factory(gold, [])),
        retriever=minibench_bm25,
        progress=False,
    )
    assert again.cached == names and not again.ran
