"""Sweep (backbone, executor) model pairs and single-agent baselines; combined table and plots.

    python recipes/sweep.py --config recipes/configs/sweep_minibench.yaml [--set base.samples=1]

Each cell is an evaluation in <output_dir>/cells/<cell>/ (resumable; a finished, unchanged
cell is loaded from disk). Writes <output_dir>/sweep.md, sweep.json, pareto.png (accuracy vs
sub-agent tokens, Pareto frontier marked) and capacity.png (one role's model varied).
"""

from __future__ import annotations

import argparse
import logging
import sys

from executor_sft.configfile import add_option
from executor_sft.eval.sweep import load_sweep_config, run_sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, help="sweep YAML (SweepConfig)")
    add_option(parser, "output_dir", help="override output_dir")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (YAML value)"
    )
    add_option(parser, "no_progress", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
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
