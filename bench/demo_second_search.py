"""Why a demo student does or does not search twice: its training rows and its turn-2 choice.

    python bench/demo_second_search.py --out outputs/demo-ablation --seeds 0 1 2

Reads what `bench/demo_ablation.py` left per seed (each variant's `sft.jsonl` and trained
`student-sft/`, the scripted teacher's evaluation runs, the world's sub-query types) and
reports, per variant:

- its SFT rows: how many, and how many two-search rows sit on plain sub-queries (needless
  second searches) and on ambiguous ones (needed);
- P(search again): the probe of `bench.probing.probe` at the teacher's exact turn-2
  prompt of each held-out sub-query, p_tool / (p_tool + p_answer) over the two continuations'
  sequence probabilities, averaged over plain and over ambiguous sub-queries.

The untrained student is the reference row. Writes markdown to `--results`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from executor_sft.files import read_jsonl
from executor_sft.llm.transformers_backend import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.probing
from bench.probing.probe import AMBIGUOUS, PLAIN, mean_by_kind, p_search_each, turn2_prompts  # noqa: E402

UNTRAINED_NOTE = (
    "The untrained student answers in prose (neither continuation), so its row only shows where the "
    "two-way normalisation starts, not what it does."
)
MODELS = {
    "untrained": "untrained student",
    "a": "(a) naive",
    "b": "(b) single_search",
    "c": "(c) full filter",
}


def _types_by_text(world: Path) -> dict[str, str]:
    return {q["question"]: q.get("type", "untyped") for q in read_jsonl(world / "subqueries_train.jsonl")}


def row_counts(sft_path: Path, types: dict[str, str]) -> dict[str, int]:
    """Rows, and two-search rows by the type of their sub-query (the first user message)."""
    counts = {"rows": 0, f"2:{PLAIN}": 0, f"2:{AMBIGUOUS}": 0, "2:untyped": 0}
    for row in read_jsonl(sft_path):
        counts["rows"] += 1
        searches = sum(bool(m.get("tool_calls")) for m in row["messages"] if m["role"] == "assistant")
        if searches >= 2:
            user = next(m["content"] for m in row["messages"] if m["role"] == "user")
            t = types.get(user, "untyped")
            counts[f"2:{t}" if f"2:{t}" in counts else "2:untyped"] += 1
    return counts


def _cell(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    if not values:
        return "-"
    mean = statistics.mean(values) * scale
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values) * scale:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="outputs/demo-ablation")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--model", default="offline:smollm2", help="the untrained student")
    p.add_argument("--results", default="bench/results/demo_second_search.md")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    a = p.parse_args(argv)
    torch.set_grad_enabled(False)
    per_seed: dict[str, list[dict]] = {m: [] for m in MODELS}
    for seed in a.seeds:
        seed_dir = Path(a.out) / f"seed{seed}"
        types = _types_by_text(seed_dir / "world")
        prompts = turn2_prompts(seed_dir / "ref-teacher" / "eval.jsonl")
        for key in a.models:
            path = a.model if key == "untrained" else str(seed_dir / f"variant-{key}" / "student-sft")
            if key != "untrained" and not Path(path).is_dir():
                print(f"[second-search] seed {seed}: no {path}; skipped", file=sys.stderr)
                continue
            model, tokenizer = load_model(path)
            probs = mean_by_kind(prompts, p_search_each(model, tokenizer, prompts, progress=True))
            counts = (
                row_counts(seed_dir / f"variant-{key}" / "sft.jsonl", types) if key != "untrained" else {}
            )
            per_seed[key].append({"seed": seed, "p_search": probs, "rows": counts})
            print(f"[second-search] seed {seed} {MODELS[key]}: {json.dumps(probs)} {counts}", file=sys.stderr)
            del model
    lines = [
        "# Why the demo student does or does not search twice",
        "",
        f"Command: `python bench/demo_second_search.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
        f"; seeds {', '.join(map(str, a.seeds))}; mean ± std over seeds.",
        "P(search again) = p(`<tool_call>`) / (p(`<tool_call>`) + p(`<answer>`)) at the scripted teacher's "
        "turn-2 prompt (after its first search) of each held-out sub-query of the ablation; greedy "
        "decoding searches again when it is above 50%. " + UNTRAINED_NOTE,
        "",
        "| model | SFT rows | two-search rows on plain | two-search rows on ambiguous | "
        "P(search again) plain % | P(search again) ambiguous % |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in MODELS.items():
        runs = per_seed[key]
        if not runs:
            continue
        rows = [
            _cell([r["rows"][k] for r in runs], digits=1) if key != "untrained" else "-"
            for k in ("rows", f"2:{PLAIN}", f"2:{AMBIGUOUS}")
        ]
        probs = [_cell([r["p_search"].get(t, float("nan")) for r in runs], 100.0) for t in (PLAIN, AMBIGUOUS)]
        lines.append(f"| {label} | " + " | ".join(rows + probs) + " |")
    lines.append("")
    Path(a.results).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
