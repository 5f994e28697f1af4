r"""GRPO prompts from rollouts: verified teacher reports -> (sub-query, reference) rows.

    python recipes/build_grpo_data.py --rollouts runs/rollouts.jsonl --output runs/grpo.jsonl \
        [--roles teacher] [--no_require_judge] [--system_prompt file:my_prompt.md] [--top_k 3 --max_searches 2]

Rows: `prompt` (system + sub-query), `reference` (answer aliases), `sub_query`, `question_id`,
`dataset`, `episode_id`, `source_run_id`. Written atomically; a summary goes to stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from executor_sft.configfile import parse_trl_args
from executor_sft.errors import InputError
from executor_sft.grpo.data import GRPODataReport, grpo_examples_from_rollouts, write_jsonl
from executor_sft.recipe_main import run_recipe


@dataclass
class BuildGRPOData:
    rollouts: list[str] = field(
        metadata={"help": "Episode records (rollouts.jsonl, schema v1); several files allowed."}
    )
    output: str = field(metadata={"help": "GRPO rows to write (JSONL)."})
    roles: list[str] = field(
        default_factory=lambda: ["teacher"], metadata={"help": "Roles whose verified reports count."}
    )
    require_judge: bool = field(default=True, metadata={"help": "Need judge True besides EM == 1."})
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "Executor system prompt (text or file:PATH); default: the one recorded in each run."
        },
    )
    top_k: int = field(default=3, metadata={"help": "Fills {top_k} in a given/packaged system prompt."})
    max_searches: int = field(
        default=2, metadata={"help": "Fills {max_searches} in a given/packaged system prompt."}
    )
    allow_empty: bool = field(
        default=False,
        metadata={"help": "Write the file even when no run qualifies (default: exit 2, nothing written)."},
    )


def main(argv: list[str] | None = None) -> GRPODataReport:
    (args,) = parse_trl_args((BuildGRPOData,), argv, description=__doc__)
    report = GRPODataReport()
    rows = grpo_examples_from_rollouts(
        args.rollouts,
        roles=tuple(args.roles),
        require_judge=args.require_judge,
        system_prompt=args.system_prompt,
        top_k=args.top_k,
        max_searches=args.max_searches,
        report=report,
    )
    if not rows and not args.allow_empty:
        raise InputError(
            f"{', '.join(args.rollouts)}: {report.summary()}; nothing to train on: collect with stronger "
            "teachers, or pass --allow_empty true to write the empty file"
        )
    write_jsonl(args.output, rows)
    print(f"{report.summary()} -> {args.output}", file=sys.stderr)
    return report


if __name__ == "__main__":
    run_recipe(main)
