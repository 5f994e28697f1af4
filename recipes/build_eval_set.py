"""Build the evaluation set once: a reference delegation run decides which ids every cell evaluates.

    python recipes/build_eval_set.py --config recipes/configs/paper/eval_set.yaml [--set samples=1]

Writes <output_dir>/eval_set.json (the ids to evaluate and the ids removed: questions the
reference run answered without any sub-query), eval_set.md (per-dataset counts) and the
reference run in <output_dir>/reference/ (a rerun resumes). Point `questions[].ids_file` of
every evaluation or sweep base config at eval_set.json.
"""

from __future__ import annotations

import argparse
import logging
import sys

from executor_sft.configfile import add_option
from executor_sft.eval.eval_set import EVAL_SET_JSON, build_eval_set, load_eval_set_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, help="eval-set YAML (EvalSetConfig)")
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
        config = load_eval_set_config(args.config, sets=args.set)
        if args.output_dir:
            config.output_dir = args.output_dir
        result = build_eval_set(config, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.markdown().rstrip())
    print(f"  {config.output_dir}/{EVAL_SET_JSON}: {len(result.ids)} ids to evaluate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
