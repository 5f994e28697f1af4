"""Offline width-vs-depth demo on the synthetic world's wide tasks (the table in docs/wide.md).

    python -m executor_sft.demos.wide_demo --out runs/wide-demo

Writes a world with wide tasks ("For each city in <country>, give its population and founding
year": list the cities, then fan out), indexes it with BM25, and runs one budget sweep with
the scripted lead, executors and answerer: width P = 1..10 at T = 3 backbone rounds, and two
depth-only lines at P = 1 (K executor turns, T backbone rounds). The scripted policies are data
sources with known behaviour: this shows the evaluation path (table answers, item/row F1,
success, the sweep table and plot), not a model's quality. At a fixed turn budget only width
buys more cells; extra executor turns buy nothing once a sub-agent has its fact, and extra
rounds buy one cell a round, in sequence.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from executor_sft.eval.budget_sweep import BudgetSweepConfig, BudgetSweepResult, run_budget_sweep
from executor_sft.synthetic.backend import BACKEND

WORLD = {"seed": 0, "n_entities": 800, "n_questions": 200, "wide_share": 0.3}
WIDTHS = [1, 2, 3, 4, 6, 8, 10]
TURN_BUDGET = 3
"""Backbone rounds of the width line and of the K line: one lists the entities, two fan out."""


def demo_config(out: Path, world_dir: Path, widths: list[int] = WIDTHS) -> BudgetSweepConfig:
    def scripted(policy: str) -> dict:
        return {"backend": BACKEND, "model": policy, "world": str(world_dir)}

    return BudgetSweepConfig.model_validate(
        {
            "name": "wide demo",
            "output_dir": str(out / "sweep"),
            "metric": "item_f1",
            "axes": [
                {
                    "name": "width",
                    "field": "max_parallel",
                    "values": widths,
                    "fixed": {"max_rounds": TURN_BUDGET, "max_turns": 3},
                },
                {
                    "name": "depth (K)",
                    "field": "max_turns",
                    "values": [2, 3, 5, 10],
                    "fixed": {"max_parallel": 1, "max_rounds": TURN_BUDGET},
                },
                {
                    "name": "depth (T)",
                    "field": "max_rounds",
                    "values": [2, 3, 5, 9, 11],
                    "fixed": {"max_parallel": 1, "max_turns": 3},
                },
            ],  # fmt: skip
            "base": {
                "questions": [{"path": str(world_dir / "questions.jsonl"), "formats": "table"}],
                "samples": 1,
                "concurrency": 8,
                "llm_cache": False,
                "plots": False,
                "models": {
                    r: scripted(p)
                    for r, p in (("backbone", "backbone"), ("executor", "teacher"), ("answerer", "answerer"))
                },  # fmt: skip
                "pipeline": {
                    "executor_roles": ["executor"],
                    "driver": "executor",
                    "max_concurrent_executors": 16,
                },
                "retriever": {"index": str(out / "index"), "k": 3},
                "build_index_from": str(world_dir / "corpus.jsonl"),
            },
        }
    )


def run_demo(out: Path, widths: list[int] = WIDTHS, progress: bool = True) -> BudgetSweepResult:
    from executor_sft.synthetic import write_world

    world_dir = out / "world"
    if not (world_dir / "world.json").exists():
        write_world(world_dir, **WORLD)
    return run_budget_sweep(demo_config(out, world_dir, widths), progress=progress)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="runs/wide-demo")
    parser.add_argument("--no_progress", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(run_demo(Path(args.out), progress=not args.no_progress).summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
