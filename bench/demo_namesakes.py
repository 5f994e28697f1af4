"""Which namesakes does a trained demo student search twice for? Its rows and runs by subject kind.

    python bench/demo_namesakes.py --out outputs/demo-ablation-conv --seeds 0 1 --variants c a

The demo world's ambiguous sub-queries name a person by occupation ("... (film director)") or a
city by its country ("the city Perkrond (Ziltraebre)"), and a student learns when to search again
from the two-search rows it trains on. This script splits, per seed and variant that
`bench/demo_ablation.py` finished under `--out`, both sides by the sub-query's subject kind (the
entity type `parse_subquery` reads from it) and by whether it names a descriptor:

- the training rows (`variant-<v>/sft.jsonl`): how many search once and how many twice;
- the held-out runs of one evaluation mode (`variant-<v>/eval-<mode>/eval.jsonl`), per sub-query
  type (plain, ambiguous): runs, P(2 searches) and EM.

A kind whose ambiguous runs are not searched twice can then be traced to its rows. Prints two
markdown tables (and writes them to `--results`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.probing
from bench.probing.probe import AMBIGUOUS, PLAIN  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_ablation as ablation  # noqa: E402  (the sibling bench script: where it keeps each evaluation)

from executor_sft.files import read_jsonl  # noqa: E402
from executor_sft.synthetic.relations import parse_subquery  # noqa: E402
from executor_sft.synthetic.world import World, load_world  # noqa: E402


def subject_kind(world: World, sub_query: str) -> tuple[str, bool]:
    """(entity type of the sub-query's subject, or "unparsed"; whether it names a descriptor)."""
    parsed = parse_subquery(sub_query, known_type=world.types_of)
    if parsed is None:
        return "unparsed", False
    return parsed.relation.subject, bool(parsed.descriptor)


def _label(kind: tuple[str, bool]) -> str:
    return f"{kind[0]}, {'named' if kind[1] else 'no'} descriptor"


def training_rows(world: World, rows: Iterable[dict]) -> dict[tuple[str, bool], Counter]:
    """Per subject kind: how many rows search once (1) and how many at least twice (2)."""
    out: dict[tuple[str, bool], Counter] = defaultdict(Counter)
    for row in rows:
        messages = row["messages"]
        sub_query = next(m["content"] for m in messages if m["role"] == "user")
        calls = sum(len(m.get("tool_calls") or []) for m in messages)
        out[subject_kind(world, sub_query)][min(calls, 2)] += 1
    return dict(out)


def held_out_runs(world: World, runs: Iterable[dict]) -> dict[tuple[str, str, bool], dict[str, float]]:
    """Per (sub-query type, subject kind): runs, P(2 searches), EM."""
    groups: dict[tuple[str, str, bool], list[dict]] = defaultdict(list)
    for run in runs:
        score = run["score"]
        groups[(score["type"], *subject_kind(world, score["sub_query"]))].append(score)
    return {
        key: {
            "runs": len(scores),
            "p2": sum(s["n_searches"] >= 2 for s in scores) / len(scores),
            "em": sum(s["em"] for s in scores) / len(scores),
        }
        for key, scores in groups.items()
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="outputs/demo-ablation", help="what bench/demo_ablation.py wrote")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--variants", nargs="+", default=["c"])
    p.add_argument("--mode", default="mean@4:0.6", help="the evaluation mode whose runs are read")
    p.add_argument("--results", default=None, help="also write the tables here")
    a = p.parse_args(argv)
    rows_table = [
        "Training rows by subject kind (one search / two searches):",
        "",
        "| seed | variant | subject | rows searching once | rows searching twice |",
        "|---:|---|---|---:|---:|",
    ]
    runs_table = [
        f"Held-out runs ({a.mode}) by sub-query type and subject kind:",
        "",
        "| seed | variant | type | subject | runs | P(2 searches) | EM |",
        "|---:|---|---|---|---:|---:|---:|",
    ]
    for seed in a.seeds:
        seed_dir = Path(a.out) / f"seed{seed}"
        world = load_world(seed_dir / "world")
        for variant in a.variants:
            variant_dir = seed_dir / f"variant-{variant}"
            runs_path = variant_dir / ablation.eval_dir(a.mode) / "eval.jsonl"
            if not runs_path.is_file():
                print(
                    f"seed {seed} ({variant}): no evaluation in {runs_path.parent}; skipped", file=sys.stderr
                )
                continue
            for kind, counts in sorted(training_rows(world, read_jsonl(variant_dir / "sft.jsonl")).items()):
                rows_table.append(f"| {seed} | ({variant}) | {_label(kind)} | {counts[1]} | {counts[2]} |")
            for (kind_type, *kind), m in sorted(held_out_runs(world, read_jsonl(runs_path)).items()):
                type_name = {PLAIN: "plain", AMBIGUOUS: "ambiguous"}.get(kind_type, kind_type)
                runs_table.append(
                    f"| {seed} | ({variant}) | {type_name} | {_label(tuple(kind))} | {m['runs']} | "
                    f"{m['p2']:.1%} | {m['em']:.1%} |"
                )
    text = "\n".join([*rows_table, "", *runs_table]) + "\n"
    print(text, end="")
    if a.results:
        Path(a.results).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
