"""Collect teacher/student executor rollouts under a fixed backbone.

    python recipes/collect_rollouts.py --config recipes/configs/collect_minibench_offline.yaml
    python recipes/collect_rollouts.py --config CFG --num_shards 4 --shard_index 0   # one machine of four
    python recipes/collect_rollouts.py --config CFG --set models.student.model=runs/sft   # any field
    python recipes/collect_rollouts.py merge --inputs out/rollouts-*.jsonl --output out/rollouts.jsonl

Re-running the same command resumes: finished episodes are skipped, never duplicated. One
process writes a rollouts file at a time (a second launch fails naming the first's pid, or waits
with --wait_for_lock); a resume with a changed config is refused unless --accept_system_change; episodes
that failed (an endpoint or the retrieval server down, a full disk) are retried. Exit status: 0 when
every episode is stored, 1 when some are left for a re-run, 2 for bad input, 130 after Ctrl-C,
143 after SIGTERM (which says what was kept, as Ctrl-C does).
"""

from __future__ import annotations

import logging
import sys

from executor_sft.configfile import RecipeArgumentParser, RecipeHelpFormatter, add_option
from executor_sft.episode_runner import interrupted_line
from executor_sft.errors import say_on_sigterm
from executor_sft.files import output_errors
from executor_sft.preflight import check_config
from executor_sft.recipe_main import run_recipe
from executor_sft.rollout import collect, format_result, load_collect_config, merge_rollouts, select_questions
from executor_sft.rollout.config import check_inputs
from executor_sft.rollout.engine import unfinished_line
from executor_sft.safe_interrupt import run_async


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "merge":
        return merge(argv[1:])
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "preflight_only", "set")}
    config = load_collect_config(args.config, overrides, sets=args.set)
    selected: list = []  # a bad questions file is one more line of the preflight's, before any model loads
    passed = check_config(
        config,
        args.config,
        lambda: check_inputs(config),
        lambda: selected.append(select_questions(config)),
    )
    if args.preflight_only:
        print(passed)
        return 0
    say_on_sigterm(lambda: interrupted_line(config.rollouts_path, "terminated (SIGTERM)"))
    try:
        with output_errors(config.output_dir):
            result = run_async(collect(config, questions=selected[0]))
    except KeyboardInterrupt:
        print(interrupted_line(config.rollouts_path), file=sys.stderr)
        return 130
    print(format_result(result))
    unfinished = unfinished_line(result)
    if unfinished is not None:
        print(f"error: {unfinished}", file=sys.stderr)
        return 1
    return 0


def merge(argv: list[str]) -> int:
    parser = RecipeArgumentParser(prog="collect_rollouts.py merge")
    parser.add_argument("--inputs", nargs="+", required=True)
    parser.add_argument("--output", required=True)
    add_option(parser, "accept_system_change", action="store_true")
    args = parser.parse_args(argv)
    written, duplicates = merge_rollouts(
        args.inputs, args.output, accept_system_change=args.accept_system_change
    )
    print(f"merged {written} episodes into {args.output} ({duplicates} duplicates skipped)")
    return 0


def _parser() -> RecipeArgumentParser:
    parser = RecipeArgumentParser(description=__doc__, formatter_class=RecipeHelpFormatter)
    parser.add_argument(
        "--config", required=True, help="YAML file mapping onto executor_sft.rollout.CollectConfig"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (YAML value)"
    )
    add_option(parser, "output_dir")
    add_option(parser, "num_shards", type=int)
    add_option(parser, "shard_index", type=int)
    parser.add_argument("--concurrency", type=int)
    add_option(parser, "engine", help="in_process (default) or ray (docs/scale.md)")
    add_option(parser, "samples_per_question", type=int)
    add_option(parser, "wait_for_lock", action="store_true", default=None, help="wait for another writer")
    add_option(
        parser,
        "accept_system_change",
        action="store_true",
        default=None,
        help="resume a rollouts file written with another config or schema version",
    )
    add_option(
        parser,
        "preflight_only",
        action="store_true",
        help="check the config's endpoints, API keys, weights and index, print what is missing, and stop",
    )
    return parser


if __name__ == "__main__":
    run_recipe(main)
