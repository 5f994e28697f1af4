"""Per-type table from finished demo runs: plain vs ambiguous held-out sub-queries.

    python bench/demo_by_type.py --runs outputs/demo-bench --seeds 0 1 2

Reads each seed's `eval_{before,after,teacher}.jsonl` (one scored run per sub-query) and the
world's `subqueries_test.jsonl` (its `type`), and prints EM, the share of two-search runs,
searches per call and tokens per sub-query per type, mean ± std over seeds. For runs made
before `ExecutorEvalResult.by_type` existed; new runs carry the same numbers in results.json.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from executor_sft.files import read_jsonl

LABELS = {"before": "student before SFT", "after": "student after SFT", "teacher": "scripted teacher"}


def per_type(seed_dir: Path, which: str) -> dict[str, dict[str, float]]:
    types = {
        q["id"]: q.get("type", "untyped") for q in read_jsonl(seed_dir / "world" / "subqueries_test.jsonl")
    }
    groups: dict[str, list[dict]] = {}
    for row in read_jsonl(seed_dir / f"eval_{which}.jsonl"):
        groups.setdefault(types[row["score"]["id"]], []).append(row["score"])
    return {
        kind: {
            "n": len(scores),
            "em": 100 * statistics.mean(s["em"] for s in scores),
            "two_search": 100 * statistics.mean(s["n_searches"] >= 2 for s in scores),
            "searches": statistics.mean(s["n_searches"] for s in scores),
            "tokens": statistics.mean(s["tokens"] for s in scores),
        }
        for kind, scores in sorted(groups.items())
    }


def _cell(values: list[float], digits: int) -> str:
    mean = statistics.mean(values)
    return (
        f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"
        if len(values) > 1
        else f"{mean:.{digits}f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=Path, default=Path("outputs/demo-bench"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = p.parse_args(argv)
    lines = [
        "| executor | sub-query type | n per seed | EM % | two searches % | searches / call | tokens / sub-query |",
        "|---|---|---|---|---|---|---|",
    ]
    for which, label in LABELS.items():
        tables = [per_type(a.runs / f"seed{s}", which) for s in a.seeds]
        for kind in sorted({k for t in tables for k in t}):
            rows = [t[kind] for t in tables if kind in t]
            ns = "/".join(str(r["n"]) for r in rows)
            lines.append(
                f"| {label} | {kind} | {ns} | {_cell([r['em'] for r in rows], 1)} | "
                f"{_cell([r['two_search'] for r in rows], 1)} | {_cell([r['searches'] for r in rows], 2)} | "
                f"{_cell([r['tokens'] for r in rows], 0)} |"
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
