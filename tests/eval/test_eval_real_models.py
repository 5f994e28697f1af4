"""Evaluation and sweep with real small models on CPU (SmolLM2-135M-Instruct, tiny random Qwen3).

Outputs are whatever these models write; the tests check that the real path runs end to end
and that the files it promises exist and agree with the episodes.
"""

from __future__ import annotations

import json

import pytest
import yaml
from eval_helpers import scripted, scripted_factory
from PIL import Image
from script_modules import load_script

from executor_sft.eval import EvalResults, run_sweep
from executor_sft.eval.sweep import SweepConfig
from executor_sft.llm import ModelPool
from executor_sft.llm.config import build_chat_model
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.slow

SMOL = {"backend": "transformers", "model": "offline:smollm2"}
TINY = {"backend": "transformers", "model": "offline:tiny-qwen3"}


def _recipe(name: str):
    return load_script(f"recipes/{name}.py")


def _small_pipeline(max_tokens: int = 24) -> dict:
    return {
        "max_rounds": 1,
        "max_parallel": 2,
        "max_turns": 2,
        "executor_roles": ["executor"],
        "driver": "executor",
        "roles": {r: {"sampling": {"max_tokens": max_tokens}} for r in ("backbone", "executor", "answerer")},
    }


def test_evaluate_recipe_with_smollm2(tmp_path, minibench_questions_path, minibench_bm25_dir, capsys):
    # Start from the shipped example config, shrink it, and run the recipe's CLI. Its backbone is
    # the oracle (MuSiQue gold hops), so the real SmolLM2 executor gets a sub-query on real passages.
    cfg = yaml.safe_load((REPO_ROOT / "recipes/configs/eval_minibench_smollm2.yaml").read_text())
    assert cfg["models"]["backbone"]["backend"] == "oracle"
    cfg["models"]["backbone"]["questions"] = str(minibench_questions_path)
    cfg.update(
        output_dir=str(tmp_path / "eval"),
        questions=[
            {
                "path": str(minibench_questions_path),
                "split": "dev",
                "datasets": ["musique"],
                "limit": 1,
            }
        ],
        retriever={"index": str(minibench_bm25_dir), "k": 3},
        pipeline=_small_pipeline(),
    )
    cfg.pop("build_index_from")
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(cfg))
    evaluate = _recipe("evaluate")
    assert evaluate.main(["--config", str(path), "--no_progress"]) == 0
    printed = capsys.readouterr().out
    assert "1 episodes run, 0 already done, 0 failed" in printed

    out = tmp_path / "eval"
    episodes = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 1
    assert all(e["config"]["models"]["backbone"] == "oracle-decomposition" for e in episodes)
    first_hop = episodes[0]["question"]["decomposition"][0]["question"]
    assert episodes[0]["rounds"][0]["sub_queries"] == [" ".join(first_hop.split())]
    assert episodes[0]["runs"] and all(r["model"] == "offline:smollm2" for r in episodes[0]["runs"])
    assert all(e["usage"]["executor"]["completion_tokens"] > 0 for e in episodes)
    results = EvalResults.load_json(out / "results.json")
    assert set(results.datasets) == {"musique"}
    assert results.datasets["musique"].em.mean == episodes[0]["metrics"]["em"]
    assert results.datasets["musique"].judge is None or results.datasets["musique"].judge.n == 1
    # Cost metrics come from the executor's real calls: tokens > 0, CER-C scored on the gold passages
    # (0 when the untrained 135M executor answers without searching).
    assert results.datasets["musique"].subagent_tokens.mean > 0
    assert results.datasets["musique"].cer_c is not None and results.datasets["musique"].cer_c.n == 1
    table = (out / "results.md").read_text()
    assert "| musique | 1 | 1 |" in table
    with Image.open(out / "summary.png") as img:
        assert img.format == "PNG" and img.size[0] > 300
    # Resume: a second run does no work.
    assert evaluate.main(["--config", str(path), "--no_progress"]) == 0
    assert "0 episodes run, 1 already done" in capsys.readouterr().out


def test_sweep_with_real_executors(tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25):
    """A 2x2 grid (scripted dispatcher or tiny Qwen3 backbone x tiny Qwen3 or SmolLM2 executor) and a
    SmolLM2 single agent; the scripted backbone guarantees sub-queries reach the real executors."""
    base = {
        "questions": [
            {"path": str(minibench_questions_path), "split": "dev", "datasets": ["hotpotqa"], "limit": 1}
        ],
        "models": {"answerer": scripted("answerer")},
        "pipeline": _small_pipeline(),
        "single_agent": {"max_turns": 2, "sampling": {"max_tokens": 24}},
        "retriever": {"index": str(minibench_bm25_dir), "k": 3},
        "metrics": {"bucket_tokens": 500, "n_buckets": 4},
    }
    sweep = SweepConfig.model_validate(
        {
            "name": "real",
            "output_dir": str(tmp_path / "sweep"),
            "base": base,
            "backbones": {"dispatch": scripted("bb-narrow"), "tiny-qwen3": TINY},
            "executors": {"tiny-qwen3": TINY, "smollm2": SMOL},
            "single_agents": {"smollm2": SMOL},
        }
    )
    scripted_models = scripted_factory({}, [])

    def factory(cfg):
        return scripted_models(cfg) if cfg.model.startswith("scripted:") else build_chat_model(cfg)

    result = run_sweep(sweep, pool=ModelPool(factory), retriever=minibench_bm25, progress=False)
    cells = {c.name: r for c, r in result.cells}
    assert set(cells) == {
        "dispatch+tiny-qwen3",
        "dispatch+smollm2",
        "tiny-qwen3+tiny-qwen3",
        "tiny-qwen3+smollm2",
        "single:smollm2",
    }
    # The scripted backbone dispatched one sub-query: each real executor ran once and used tokens.
    for name in ("dispatch+tiny-qwen3", "dispatch+smollm2"):
        group = cells[name].datasets["hotpotqa"]
        assert group.searches["invocations"] == 1 and group.subagent_tokens.mean > 0
    episode = json.loads((tmp_path / "sweep/cells/dispatch+smollm2/episodes.jsonl").read_text())
    assert (
        episode["runs"][0]["model"] == "offline:smollm2"
        and episode["runs"][0]["usage"]["completion_tokens"] > 0
    )
    assert cells["single:smollm2"].datasets["hotpotqa"].subagent_tokens.mean > 0
    for key in ("markdown", "json", "pareto", "capacity"):
        assert result.files[key].stat().st_size > 0
    assert "| dispatch+smollm2 | dispatch | smollm2 |" in result.files["markdown"].read_text()
