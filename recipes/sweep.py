"""Sweep (backbone, executor) model pairs and single-agent baselines; combined table and plots.

    python recipes/sweep.py --config recipes/configs/sweep_minibench.yaml [--set base.samples=1]

Each cell is an evaluation in <output_dir>/cells/<cell>/ (resumable; a finished, unchanged
cell is loaded from disk). Writes <output_dir>/sweep.md, sweep.json, pareto.png (accuracy vs
sub-agent tokens, Pareto frontier marked) and capacity.png (one role's model varied).
"""

from __future__ import annotations

import sys

from executor_sft.configfile import config_recipe_parser, parse_config_recipe_args
from executor_sft.errors import report_user_errors
from executor_sft.eval.sweep import load_sweep_config, run_sweep


def main(argv: list[str] | None = None) -> int:
    args = parse_config_recipe_args(config_recipe_parser(__doc__, "sweep YAML (SweepConfig)"), argv)

    def sweep() -> int:
        config = load_sweep_config(args.config, sets=args.set)
        if args.output_dir:
            config.output_dir = args.output_dir
        print(run_sweep(config, progress=not args.no_progress).summary())
        return 0

    return report_user_errors(sweep)


if __name__ == "__main__":
    sys.exit(main())
