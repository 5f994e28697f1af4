r"""Wide (table) training data as WideSeek-R1 builds it (Sec. 4, App. C.1): query, two answers, filter.

    # offline: a world with wide tasks, its tables and the scripted generator
    python -m executor_sft.synthetic --out runs/wide/world --entities 300 --questions 160 --wide_share 0.3
    python recipes/build_wide_data.py --world runs/wide/world --output runs/wide_data.jsonl \
        --generator '{factory: executor_sft.synthetic.table_generator:scripted_generator, world: runs/wide/world}'
    # any OpenAI-compatible model as the generator, over your own tables ({id, topic, header, rows} per line)
    python recipes/build_wide_data.py --tables my_tables.jsonl --output runs/wide_data.jsonl \
        --generator '{model: Qwen/Qwen3-32B, base_urls: [http://127.0.0.1:8000/v1]}'

Writes the kept instances (`question`, `answer` as a Markdown table, `unique_columns`; also `id` and
`golden_answers`, so the file is a questions file), `<output>.all.jsonl` with every instance and its
verdict, and `<output>.report.json`: generated, kept, the share retained beside the seed's 73.28%,
and the reasons for the rest. A bad argument is one `error:` line and exit status 2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from executor_sft.recipe_main import run_recipe
from executor_sft.safe_interrupt import run_async


@dataclass
class WideDataArguments:
    """The table source (exactly one of `tables` and `world`), the generator and the output."""

    output: str = field(metadata={"help": "The kept instances (JSONL); must not exist."})
    generator: str = field(metadata={"help": "Model mapping (YAML/JSON) or 'module:attr' / {factory: ...}."})
    tables: str | None = field(
        default=None, metadata={"help": "JSONL of source tables: {id, topic, header, rows}."}
    )
    world: str | None = field(
        default=None, metadata={"help": "A synthetic world directory: its tables are the source."}
    )
    limit: int | None = field(default=None, metadata={"help": "Use the first N tables."})
    seed: int = field(default=0, metadata={"help": "Draws the target row counts."})

    def __post_init__(self) -> None:
        if (self.tables is None) == (self.world is None):
            raise ValueError("give exactly one of --tables and --world")


def parse_args(argv: list[str] | None = None) -> WideDataArguments:
    from executor_sft.configfile import parse_trl_args

    (args,) = parse_trl_args((WideDataArguments,), argv, description=__doc__)
    return args


def main(argv: list[str] | None = None) -> dict:
    import yaml

    from executor_sft.errors import ConfigError
    from executor_sft.files import write_jsonl
    from executor_sft.grpo.train import build_chat_from_spec
    from executor_sft.grpo.wide_data import SourceTable, build_wide_data, output_row, retention_report

    args = parse_args(argv)
    out = Path(args.output)
    if out.exists():
        raise ConfigError(f"{out}: already exists; choose a new --output (nothing is overwritten)")
    if args.tables is not None:
        path = Path(args.tables)
        if not path.is_file():
            raise ConfigError(f"{path}: no such file")
        tables = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                tables.append(
                    SourceTable(str(row["id"]), str(row["topic"]), list(row["header"]), row.get("rows", []))
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"{path}:{n}: not a table row {{id, topic, header, rows}} ({exc})"
                ) from None
    else:
        from executor_sft.synthetic.table_generator import world_tables
        from executor_sft.synthetic.world import load_world

        if not (Path(args.world) / "world.json").is_file():
            raise ConfigError(
                f"--world {args.world}: no world.json (python -m executor_sft.synthetic --out DIR)"
            )
        tables = world_tables(load_world(args.world))
    tables = tables[: args.limit] if args.limit is not None else tables
    try:
        spec = yaml.safe_load(args.generator)
    except yaml.YAMLError:
        spec = args.generator
    generator = build_chat_from_spec(spec if isinstance(spec, dict) else args.generator, "generator")
    instances = run_async(build_wide_data(tables, generator, seed=args.seed))
    report = retention_report(instances)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(out.with_name(out.name + ".all.jsonl"), instances)
    Path(str(out) + ".report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    write_jsonl(out, [output_row(i) for i in instances if i["kept"]])
    print(
        f"wide data: {report['kept']} of {report['generated']} kept ({100 * report['retained']:.2f}%; "
        f"the seed: 73.28%); dropped: {report['dropped']}; wrote {out}"
    )
    return report


if __name__ == "__main__":
    run_recipe(main)
