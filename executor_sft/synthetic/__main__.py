"""Command line: write the synthetic world."""

from __future__ import annotations

import json

from executor_sft.synthetic.world import WorldConfig, write_world


def main(argv: list[str] | None = None) -> None:
    """`python -m executor_sft.synthetic --out DIR [--seed S --entities N --questions M --wide_share W]`."""
    import argparse

    ap = argparse.ArgumentParser(
        allow_abbrev=False, description="Write the synthetic world (corpus, questions, splits)."
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--entities", type=int, default=800)
    ap.add_argument("--questions", type=int, default=400)
    ap.add_argument("--ambiguity", type=float, default=WorldConfig.ambiguity)
    ap.add_argument(
        "--wide_share", type=float, default=WorldConfig.wide_share, help="share of wide (table) tasks"
    )
    args = ap.parse_args(argv)
    world = write_world(
        args.out,
        args.seed,
        args.entities,
        args.questions,
        ambiguity=args.ambiguity,
        wide_share=args.wide_share,
    )
    print(json.dumps(world.meta["stats"], indent=1))


if __name__ == "__main__":
    main()
