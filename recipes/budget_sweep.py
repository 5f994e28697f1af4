"""Width and depth sweeps: the pipeline's budgets (P; T and K) varied for one set of models.

    python recipes/budget_sweep.py --config recipes/configs/sweep_width_synthetic.yaml [--set base.samples=2]

Each point is an evaluation in <output_dir>/cells/<axis>-<budget><value>/ (resumable). Writes
<output_dir>/budget_sweep.md (item F1, row F1, success with Avg@k / Max@k / Pass@k, EM,
sub-agents and sub-agent tokens per question), budget_sweep.json and budget_sweep.png.
"""

from __future__ import annotations

from executor_sft.configfile import run_config_recipe
from executor_sft.eval.budget_sweep import load_budget_sweep_config, run_budget_sweep
from executor_sft.preflight import check_config
from executor_sft.recipe_main import run_recipe


def main(argv: list[str] | None = None) -> int:
    return run_config_recipe(
        __doc__,
        "budget sweep YAML (BudgetSweepConfig)",
        load_budget_sweep_config,
        lambda config, progress: run_budget_sweep(config, progress=progress).summary(),
        argv,
        preflight=check_config,
    )


if __name__ == "__main__":
    run_recipe(main)
