r"""Evaluate one system (pipeline or single-agent baseline) on question sets, resumably.

    python recipes/evaluate.py --config recipes/configs/eval_minibench_smollm2.yaml \
        [--output_dir runs/eval/x] [--samples 3] [--limit 20] [--concurrency 8] \
        [--set metrics.normalization=unicode] [--set questions.0.ids_file=...]

Writes <output_dir>/episodes.jsonl (crash-safe; a rerun resumes), results.json, results.md
and summary.png, and prints a summary. Re-running a finished evaluation only re-aggregates.
Exit status: 0 when every episode is stored, 1 when some are left for a re-run (failed: an
endpoint or the retrieval server down, a full disk), 2 for bad input, 130 after Ctrl-C.
"""

from __future__ import annotations

import sys

from executor_sft.configfile import config_recipe_parser, parse_config_recipe_args
from executor_sft.episode_runner import interrupted_line
from executor_sft.eval import load_eval_config, run_eval, select_questions
from executor_sft.eval.runner import EPISODES_FILE
from executor_sft.preflight import check_config
from executor_sft.recipe_main import run_recipe


def main(argv: list[str] | None = None) -> int:
    parser = config_recipe_parser(__doc__, "eval YAML (EvalConfig)", preflight=True)
    parser.add_argument("--samples", type=int, help="override samples (k)")
    parser.add_argument(
        "--limit",
        type=int,
        help="questions per source (each dataset of the config gets this limit: 3 datasets, --limit 1 -> 3 questions)",
    )
    parser.add_argument("--concurrency", type=int, help="override concurrency")
    parser.add_argument(
        "--accept_system_change",
        action="store_true",
        default=None,
        help="add this system's episodes to an output that holds another system's (as collection takes it)",
    )
    args = parse_config_recipe_args(parser, argv)

    overrides = {
        k: v
        for k, v in {
            "output_dir": args.output_dir,
            "samples": args.samples,
            "concurrency": args.concurrency,
            "accept_system_change": args.accept_system_change,
        }.items()
        if v is not None
    }

    config = load_eval_config(args.config, overrides, sets=args.set)
    if args.limit is not None:
        config.questions = [q.model_copy(update={"limit": args.limit}) for q in config.questions]
    # a bad questions file is one more line of the preflight's, before any model loads
    passed = check_config(config, args.config, lambda: select_questions(config.questions))
    if args.preflight_only:
        print(passed)
        return 0
    try:
        run = run_eval(config, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(interrupted_line(config.out / EPISODES_FILE), file=sys.stderr)
        return 130
    print(run.summary())
    if run.failed:
        print(
            f"error: {config.out / EPISODES_FILE}: {len(run.failed)} episodes unfinished; they are not "
            "stored, so run the same command again to resume them",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    run_recipe(main)
