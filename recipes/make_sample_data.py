"""Generate the project's sample data (data/) with the project's own pipeline, deterministically.

    python recipes/make_sample_data.py                  # writes data/ (the committed sample)
    python recipes/make_sample_data.py --out /tmp/x     # same bytes elsewhere

See `executor_sft.demos.sample_data` for the steps. `data/sft.jsonl` is the embedded
default of `accelerate launch recipes/sft_executor.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from executor_sft.configfile import add_option
from executor_sft.demos.sample_data import SampleConfig, make_sample_data
from executor_sft.errors import report_user_errors

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data"


def parse_args(argv: list[str] | None = None) -> tuple[Path, SampleConfig]:
    defaults = SampleConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: data/)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--entities", type=int, default=defaults.entities)
    p.add_argument("--questions", type=int, default=defaults.questions)
    add_option(p, "collect_questions", type=int, default=defaults.collect_questions)
    add_option(p, "max_rounds", type=int, default=defaults.max_rounds)
    a = p.parse_args(argv)
    return a.out, SampleConfig(
        seed=a.seed,
        entities=a.entities,
        questions=a.questions,
        collect_questions=a.collect_questions,
        max_rounds=a.max_rounds,
    )


def main(argv: list[str] | None = None) -> int:
    out, cfg = parse_args(argv)

    def make() -> int:
        result = make_sample_data(out, cfg)
        print(json.dumps({"config": asdict(cfg), "strata": result.strata}, indent=None))
        print(result.summary(), file=sys.stderr)
        return 0

    return report_user_errors(make)


if __name__ == "__main__":
    sys.exit(main())
