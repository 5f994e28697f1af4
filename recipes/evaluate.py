r"""Evaluate one system (pipeline or single-agent baseline) on question sets, resumably.

    python recipes/evaluate.py --config recipes/configs/eval_minibench_smollm2.yaml \
        [--output_dir runs/eval/x] [--samples 3] [--limit 20] [--concurrency 8] \
        [--set metrics.normalization=unicode] [--set questions.0.ids_file=...]

Writes <output_dir>/episodes.jsonl (crash-safe; a rerun resumes), results.json, results.md
and summary.png, and prints a summary. Re-running a finished evaluation only re-aggregates.
"""

from __future__ import annotations

import sys

from executor_sft.configfile import config_recipe_parser, parse_config_recipe_args
from executor_sft.errors import report_user_errors
from executor_sft.eval import load_eval_config, run_eval


def main(argv: list[str] | None = None) -> int:
    parser = config_recipe_parser(__doc__, "eval YAML (EvalConfig)")
    parser.add_argument("--samples", type=int, help="override samples (k)")
    parser.add_argument("--limit", type=int, help="override every question source's per-dataset limit")
    parser.add_argument("--concurrency", type=int, help="override concurrency")
    args = parse_config_recipe_args(parser, argv)

    overrides = {
        k: v
        for k, v in {
            "output_dir": args.output_dir,
            "samples": args.samples,
            "concurrency": args.concurrency,
        }.items()
        if v is not None
    }

    def evaluate() -> int:
        config = load_eval_config(args.config, overrides, sets=args.set)
        if args.limit is not None:
            config.questions = [q.model_copy(update={"limit": args.limit}) for q in config.questions]
        run = run_eval(config, progress=not args.no_progress)
        print(run.summary())
        return 1 if run.failed else 0

    return report_user_errors(evaluate)


if __name__ == "__main__":
    sys.exit(main())
