"""The whole method on one CPU in minutes: world -> index -> collect -> filter -> SFT -> evaluate.

    python recipes/demo.py                                   # seed 0, recipes/configs/demo.yaml
    python recipes/demo.py --seed 1 --out outputs/demo/seed1
    python recipes/demo.py --config recipes/configs/demo_tiny.yaml   # smoke test (tiny Qwen3)

Prints the before/after table of the student on held-out sub-queries and writes
`results.md` / `results.json` under `--out`. The steps are in `executor_sft.demos.demo`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from executor_sft.configfile import RecipeArgumentParser, RecipeHelpFormatter, add_option
from executor_sft.demos.demo import DemoConfig, load_config, run_demo
from executor_sft.recipe_main import run_recipe

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "demo.yaml"


def parse_args(argv: list[str] | None = None) -> DemoConfig:
    p = RecipeArgumentParser(description=__doc__, formatter_class=RecipeHelpFormatter)
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="YAML with DemoConfig fields")
    p.add_argument("--seed", type=int)
    p.add_argument("--out", help="output directory (default from the config, e.g. outputs/demo)")
    p.add_argument("--model", help="student model (offline alias or path)")
    add_option(p, "max_steps", type=int)
    add_option(p, "eval_subqueries", type=int)
    add_option(p, "student_questions", type=int)
    a = vars(p.parse_args(argv))
    path = a.pop("config")
    return load_config(path, a)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    cfg = parse_args(argv)
    result = run_demo(cfg)
    print(result.markdown)
    print(f"wrote {Path(cfg.out) / 'results.md'} and results.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_recipe(main)
