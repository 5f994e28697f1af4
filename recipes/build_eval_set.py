"""Build the evaluation set once: a reference delegation run decides which ids every cell evaluates.

    python recipes/build_eval_set.py --config recipes/configs/paper/eval_set.yaml [--set samples=1]

Writes <output_dir>/eval_set.json (the ids to evaluate and the ids removed: questions the
reference run answered without any sub-query), eval_set.md (per-dataset counts) and the
reference run in <output_dir>/reference/ (a rerun resumes). Point `questions[].ids_file` of
every evaluation or sweep base config at eval_set.json. Run it on original questions only:
the shipped 3,869-question split already is the paper's remaining set (docs/reproduce.md).
"""

from __future__ import annotations

import sys

from executor_sft.configfile import config_recipe_parser, parse_config_recipe_args
from executor_sft.errors import report_user_errors
from executor_sft.eval.eval_set import EVAL_SET_JSON, build_eval_set, load_eval_set_config


def main(argv: list[str] | None = None) -> int:
    args = parse_config_recipe_args(config_recipe_parser(__doc__, "eval-set YAML (EvalSetConfig)"), argv)

    def build() -> int:
        config = load_eval_set_config(args.config, sets=args.set)
        if args.output_dir:
            config.output_dir = args.output_dir
        result = build_eval_set(config, progress=not args.no_progress)
        print(result.markdown().rstrip())
        print(f"  {config.output_dir}/{EVAL_SET_JSON}: {len(result.ids)} ids to evaluate")
        return 0

    return report_user_errors(build)


if __name__ == "__main__":
    sys.exit(main())
