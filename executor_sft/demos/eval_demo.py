"""Offline demo sweep on the synthetic world (figures for docs/eval.md), no model hub needed.

    python -m executor_sft.demos.eval_demo --out runs/eval-demo [--questions 60]

Writes a small fictional world, indexes it with BM25, and sweeps backbones {scripted
backbone, tiny random Qwen3 (real transformers model)} x executors {scripted teacher (searches
again when the first search misses), scripted student (searches once)} with the scripted
answerer and judge. The scripted policies are data sources with known behaviour, not LLMs:
the point is a reproducible run of the whole evaluation path (episodes, mean@k table,
Pareto and capacity plots) in minutes on 2 CPU cores (docs/timings.md).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from executor_sft.eval.runner import ensure_index
from executor_sft.eval.sweep import SweepConfig, SweepResult, run_sweep
from executor_sft.llm.base import ChatModel
from executor_sft.llm.config import ChatModelConfig, build_chat_model
from executor_sft.llm.pool import ModelPool

SYNTHETIC = "synthetic:"


def synthetic_factory(world_dir: Path):
    """A ModelPool factory: `synthetic:<role>` configs become the world's scripted policies."""
    from executor_sft.synthetic import (
        ScriptedAnswerer,
        ScriptedBackbone,
        ScriptedJudge,
        ScriptedTeacherExecutor,
        load_world,
        scripted_student_executor,
    )

    world = load_world(world_dir)
    makers = {
        "backbone": lambda: ScriptedBackbone(world),
        "answerer": lambda: ScriptedAnswerer(world),
        "judge": lambda: ScriptedJudge(),
        "teacher": lambda: ScriptedTeacherExecutor(world),
        "student": lambda: scripted_student_executor(world),
    }

    def factory(cfg: ChatModelConfig) -> ChatModel:
        if not cfg.model.startswith(SYNTHETIC):
            return build_chat_model(cfg)
        role = cfg.model.removeprefix(SYNTHETIC)
        if role not in makers:
            raise ValueError(f"unknown synthetic policy {cfg.model!r}; known: {sorted(makers)}")
        return makers[role]()

    return factory


def demo_sweep(out: Path, n_questions: int = 60, seed: int = 0) -> SweepResult:
    from executor_sft.synthetic import write_world

    world_dir = out / "world"
    if not (world_dir / "questions_test.jsonl").exists():
        write_world(world_dir, seed=seed, n_entities=400, n_questions=max(n_questions * 5, 100))
    index = ensure_index(out / "index", world_dir / "corpus.jsonl")

    def syn(role: str) -> dict:
        return {"backend": "openai", "model": f"{SYNTHETIC}{role}", "name": role}

    sweep = SweepConfig.model_validate(
        {
            "name": "synthetic-world demo",
            "output_dir": str(out / "sweep"),
            "base": {
                "questions": [{"path": str(world_dir / "questions_test.jsonl"), "limit": n_questions}],
                "samples": 1,
                "concurrency": 8,
                "models": {"answerer": syn("answerer"), "judge": syn("judge")},
                "pipeline": {
                    "executor_roles": ["executor"],
                    "driver": "executor",
                    "max_rounds": 4,
                    "max_turns": 3,
                },
                "retriever": {"index": str(index), "k": 3},
                "metrics": {"bucket_tokens": 2000, "n_buckets": 10},
            },
            "backbones": {
                "scripted": syn("backbone"),
                "tiny-qwen3": {"backend": "transformers", "model": "offline:tiny-qwen3", "max_tokens": 32},
            },
            "executors": {"student": syn("student"), "teacher": syn("teacher")},
            "metric": "judge",
        }
    )
    return run_sweep(sweep, pool=ModelPool(synthetic_factory(world_dir)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="runs/eval-demo")
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(demo_sweep(Path(args.out), args.questions, args.seed).summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
