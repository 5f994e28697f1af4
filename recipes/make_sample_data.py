"""Generate the project's sample data (data/) with the project's own pipeline, deterministically.

    python recipes/make_sample_data.py                  # writes data/ (the committed sample)
    python recipes/make_sample_data.py --out outputs/sample            # same bytes elsewhere
    python recipes/make_sample_data.py --config my_sample.yaml --seed 1  # SampleConfig fields from YAML

See `executor_sft.demos.sample_data` for the steps. `data/sft.jsonl` is the embedded
default of `python recipes/sft_executor.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import asdict
from pathlib import Path

from executor_sft.configfile import RecipeArgumentParser, RecipeHelpFormatter, add_option, read_yaml
from executor_sft.demos.sample_data import SampleConfig, make_sample_data
from executor_sft.errors import ConfigError
from executor_sft.recipe_main import run_recipe

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = RecipeArgumentParser(description=__doc__, formatter_class=RecipeHelpFormatter)
    p.add_argument("--config", help="YAML with SampleConfig fields (seed, entities, ...); flags override it")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: data/)")
    p.add_argument("--seed", type=int)
    p.add_argument("--entities", type=int)
    p.add_argument("--questions", type=int)
    add_option(p, "collect_questions", type=int)
    add_option(p, "max_rounds", type=int)
    return p.parse_args(argv)


def sample_config(args: argparse.Namespace) -> SampleConfig:
    """The defaults, then the `--config` file's fields, then the flags given."""
    values = read_yaml(args.config) if args.config else {}
    known = {f.name for f in dataclasses.fields(SampleConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{args.config}: unknown key(s) {unknown}; SampleConfig has {sorted(known)}")
    flags = {k: v for k, v in vars(args).items() if k in known and v is not None}
    return SampleConfig(**{**values, **flags})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = sample_config(args)
    result = make_sample_data(args.out, cfg)
    print(json.dumps({"config": asdict(cfg), "strata": result.strata}, indent=None))
    print(result.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_recipe(main)
