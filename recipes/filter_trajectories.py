r"""Filter rollouts into SFT rows: rollouts.jsonl -> sft.jsonl + composition report.

    python recipes/filter_trajectories.py --rollouts rollouts.jsonl --output sft.jsonl \
        --report report.json [--no_require_judge] [--teacher_single all] [--min_searches 2]

Every `FilterConfig` field is a flag (see --help); `--config file.yaml` sets them from YAML
(`recipes/configs/filter_paper.yaml`: the paper's strata with `teacher_single: all`, and one
record per question and stratum, our reading of App. D).
The episodes are read by episode id, not in file order (`store.iter_episodes_by_id`): engines
write them as they finish, and reading by id makes the output a function of the set of episodes,
whatever engine, concurrency, resume or shard merge wrote the file (docs/filters.md).
Outputs are written atomically: a crash or SIGTERM leaves the previous files (or none), never a
half file or a temporary one. Both outputs are checked before anything is read, and the report
is written before the rows are renamed into place, so a failure leaves neither changed.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

from executor_sft.recipe_main import run_recipe, starting

with starting():  # a Ctrl-C in the first second lands here, in the imports
    from tqdm import tqdm

    from executor_sft.configfile import parse_trl_args
    from executor_sft.files import check_output_file
    from executor_sft.filters import (
        EpisodeFilter,
        FilterConfig,
        InputError,
        atomic_open,
        iter_episodes_by_id,
        load_fidelity_tokenizer,
        print_report,
        refuse_overwrite,
        require_file,
        write_json,
    )


@dataclass
class FilterPaths:
    rollouts: str = field(metadata={"help": "Episode records (rollouts.jsonl, schema v1)."})
    output: str = field(metadata={"help": "SFT rows to write (JSONL, TRL conversational format)."})
    report: str | None = field(default=None, metadata={"help": "Composition report to write (JSON)."})
    allow_empty: bool = field(
        default=False,
        metadata={"help": "Write the files even when no run is kept (default: exit 2, nothing written)."},
    )
    fidelity_tokenizer: str | None = field(
        default=None,
        metadata={
            "help": "Tokenizer of the model to train (offline alias, path or hub id): each kept row that "
            "carries sampled ids is re-rendered and compared with them (report: token_fidelity)."
        },
    )


def _write_outputs(filt: EpisodeFilter, paths: FilterPaths) -> dict:
    """Stream rows into a temporary file renamed over `paths.output` only once the report is written."""
    with (
        atomic_open(paths.output) as out,
        tqdm(iter_episodes_by_id(paths.rollouts), desc="filtering", unit=" episodes", file=sys.stderr) as bar,
    ):
        n_rows = 0
        for n_rows, row in enumerate(filt.stream(bar), start=1):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            if n_rows % 100 == 0:
                bar.set_postfix(rows=n_rows, refresh=False)
        if filt.report.episodes == 0:
            raise InputError(f"{paths.rollouts}: no episodes in the file; pass a collect_rollouts.py output")
        if n_rows == 0 and not paths.allow_empty:
            raise InputError(_no_rows_message(filt, paths))
        report = filt.report.to_dict()
        if paths.report:
            write_json(paths.report, report)
    return report


def _no_rows_message(filt: EpisodeFilter, paths: FilterPaths) -> str:
    report = filt.report
    reasons = ", ".join(f"{k}={v}" for k, v in report.exclusions.most_common(4)) or "none"
    return (
        f"{paths.rollouts}: 0 of {report.runs} runs kept (excluded: {reasons}), so there is nothing to "
        "train on; collect with stronger executors, or pass --allow_empty true to write the empty "
        "file and its report"
    )


def _check_paths(paths: FilterPaths) -> None:
    """Input exists, no output is an input (or the other output), and both outputs can be written."""
    refuse_overwrite([paths.rollouts], [paths.output, paths.report])
    require_file(paths.rollouts, "--rollouts")
    check_output_file(paths.output, "--output")
    if paths.report:
        check_output_file(paths.report, "--report")


def main(argv: list[str] | None = None) -> int:
    start = time.perf_counter()
    paths, config = parse_trl_args((FilterPaths, FilterConfig), argv, description=__doc__)
    _check_paths(paths)
    filt = EpisodeFilter(config, fidelity_tokenizer=load_fidelity_tokenizer(paths.fidelity_tokenizer))
    report = _write_outputs(filt, paths)
    print_report(report)
    totals = report["totals"]
    if "token_fidelity" in report:
        print(filt.report.fidelity.summary(), file=sys.stderr)
    print(
        f"{totals['episodes']} episodes, {totals['runs']} runs -> {totals['rows']} rows "
        f"({totals['unique_questions']} questions) in {time.perf_counter() - start:.1f}s; "
        f"wrote {paths.output}" + (f" and {paths.report}" if paths.report else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    run_recipe(main, suffix="; nothing written")
