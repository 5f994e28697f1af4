"""Build the evaluation set once: a reference delegation run decides which ids every cell evaluates.

    python recipes/build_eval_set.py --config recipes/configs/paper/eval_set.yaml [--set samples=1]

Writes <output_dir>/eval_set.json (the ids to evaluate and the ids removed: questions the
reference run answered without any sub-query), eval_set.md (per-dataset counts) and the
reference run in <output_dir>/reference/ (a rerun resumes). Point `questions[].ids_file` of
every evaluation or sweep base config at eval_set.json. Run it on original questions only:
the shipped 3,869-question split already is the paper's remaining set (docs/reproduce.md).
"""

from __future__ import annotations

from executor_sft.configfile import run_config_recipe
from executor_sft.eval.eval_set import EVAL_SET_JSON, build_eval_set, load_eval_set_config
from executor_sft.recipe_main import run_recipe


def main(argv: list[str] | None = None) -> int:
    def build(config, progress: bool) -> str:
        result = build_eval_set(config, progress=progress)
        ids = f"  {config.output_dir}/{EVAL_SET_JSON}: {len(result.ids)} ids to evaluate"
        return result.markdown().rstrip() + "\n" + ids

    return run_config_recipe(__doc__, "eval-set YAML (EvalSetConfig)", load_eval_set_config, build, argv)


if __name__ == "__main__":
    run_recipe(main)
