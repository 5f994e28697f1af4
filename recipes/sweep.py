"""Sweep (backbone, executor) model pairs and single-agent baselines; combined table and plots.

    python recipes/sweep.py --config recipes/configs/sweep_minibench.yaml [--set base.samples=1]

Each cell is an evaluation in <output_dir>/cells/<cell>/ (resumable; a finished, unchanged
cell is loaded from disk). Writes <output_dir>/sweep.md, sweep.json, pareto.png (accuracy vs
sub-agent tokens, Pareto frontier marked) and capacity.png (one role's model varied).
"""

from __future__ import annotations

import sys

from executor_sft.configfile import config_recipe_parser, parse_config_recipe_args
from executor_sft.eval.sweep import load_sweep_config, run_sweep


def main(argv: list[str] | None = None) -> int:
    args = parse_config_recipe_args(config_recipe_parser(__doc__, "sweep YAML (SweepConfig)"), argv)
    try:
        sweep = load_sweep_config(args.config, sets=args.set)
        if args.output_dir:
            sweep.output_dir = args.output_dir
        result = run_sweep(sweep, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
