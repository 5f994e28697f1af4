r"""Ablate trajectory filters: one rollouts file through several filter configurations, each
variant's rows trained for the same optimizer steps and scored by the executor-level evaluation.

    # embedded default: the sample data/, SmolLM2-135M, two variants, a few steps each, CPU
    python recipes/filter_ablation.py --config recipes/configs/filter_ablation.yaml
    python recipes/filter_ablation.py --config my_ablation.yaml --output_dir runs/ablation \
        --set max_steps=200 --set eval.samples=4

Writes <output_dir>/results.json and results.md, and per variant <output_dir>/<name>/: its rows
(sft.jsonl, sft.report.json), model/, eval.jsonl and done.json. A rerun reuses each variant whose
done file matches its rows, steps, SFT config and evaluation (docs/filters.md, "Ablating a filter").
"""

from __future__ import annotations

from executor_sft.recipe_main import run_recipe, starting

with starting():  # a Ctrl-C in the first second lands here, in the imports
    from executor_sft.configfile import run_config_recipe


def main(argv: list[str] | None = None) -> int:
    from executor_sft.eval.ablation import load_ablation_config, run_ablation

    return run_config_recipe(
        __doc__, "ablation YAML (AblationConfig)", load_ablation_config, run_ablation, argv
    )


if __name__ == "__main__":
    run_recipe(main)
