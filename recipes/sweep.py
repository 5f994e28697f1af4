"""Sweep (backbone, executor) model pairs and single-agent baselines; combined table and plots.

    python recipes/sweep.py --config recipes/configs/sweep_minibench.yaml [--set base.samples=1]

Each cell is an evaluation in <output_dir>/cells/<cell>/ (resumable; a finished, unchanged
cell is loaded from disk). Writes <output_dir>/sweep.md, sweep.json, pareto.png (accuracy vs
sub-agent tokens, Pareto frontier marked) and capacity.png (one role's model varied).
"""

from __future__ import annotations

from executor_sft.configfile import run_config_recipe
from executor_sft.eval.sweep import load_sweep_config, run_sweep
from executor_sft.preflight import check_config
from executor_sft.recipe_main import run_recipe


def main(argv: list[str] | None = None) -> int:
    return run_config_recipe(
        __doc__,
        "sweep YAML (SweepConfig)",
        load_sweep_config,
        lambda config, progress: run_sweep(config, progress=progress).summary(),
        argv,
        preflight=check_config,
    )


if __name__ == "__main__":
    run_recipe(main)
