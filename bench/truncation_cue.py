"""Does passage shortening tell the student when to search again? The decoupled ablation's check.

    python bench/truncation_cue.py --out /work/decoupled_runs --seed 0

SFT fits an over-long row into `max_length` by shortening its passage lines
(`executor_sft.sft.length`). The decoupled ablation's max_length-1024 units were trained on cut
lines ending in `MARK`, the condition this script reproduces; the library's fit cuts unmarked.
Two-search rows hold twice the passages, so in a
dataset where only they overflow, the first results of every two-search row are cut and those of
every one-search row are whole: "cut results" then predicts "the teacher searched again" exactly.
This script measures, for one finished seed of `bench/demo_ablation_decoupled.py`:

1. **Rows.** Per variant, how many one-search and two-search rows the fit at the run's `max_length`
   shortened.
2. **The policy.** P(search again) at the teacher's held-out turn-2 prompts (as collected: whole
   results), and at the same prompts with every passage line cut to N tokens, with and without
   the mark, for each trained checkpoint and the untrained base model.

Writes `--results`.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]

from bench.probing.results import provenance, write_results  # noqa: E402

MARK = " [...]"  # what the max_length-1024 units' fit appended to a cut passage line
RESULTS = REPO / "bench" / "results" / "truncation_cue"
VARIANTS = {"c": "(c) full filter", "m": "(a') matched control", "a": "(a) naive"}
CAPS = (60, 40)


def log(msg: str) -> None:
    print(f"[cue] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def searches(row: dict[str, Any]) -> int:
    return sum(m.get("role") == "tool" for m in row["messages"])


def rows_figures(sft_jsonl: Path, tokenizer, max_length: int) -> dict[str, dict[str, int]]:
    """{"1": {"rows": n, "shortened": k}, "2": ...} by the row's number of searches."""
    from executor_sft.files import read_jsonl
    from executor_sft.sft.length import RowTooLongError, fit_row

    out: dict[str, dict[str, int]] = {}
    for row in read_jsonl(sft_jsonl):
        f = out.setdefault(str(searches(row)), {"rows": 0, "shortened": 0, "dropped": 0})
        f["rows"] += 1
        try:
            f["shortened"] += fit_row(row, tokenizer, max_length).removed_tokens > 0
        except RowTooLongError:
            f["dropped"] += 1
    return out


def cut_prompt(prompt, tokenizer, cap: int, mark: bool):
    """`prompt` with every line of its tool messages cut to `cap` tokens (and the mark, if `mark`)."""
    messages = []
    for m in prompt.messages:
        if m.get("role") == "tool":
            lines = []
            for line in (m.get("content") or "").split("\n"):
                ids = tokenizer(line, add_special_tokens=False)["input_ids"]
                short = len(ids) > cap
                lines.append(tokenizer.decode(ids[:cap]) + (MARK if mark else "") if short else line)
            m = {**m, "content": "\n".join(lines)}
        messages.append(m)
    return dataclasses.replace(prompt, messages=messages)


def policy_figures(name: str, prompts: list) -> dict[str, float]:
    from bench.probing.probe import p_search_each
    from executor_sft.llm.transformers_backend import load_model

    t = time.perf_counter()
    model, tokenizer = load_model(name)
    out = {"as_collected": statistics.fmean(p_search_each(model, tokenizer, prompts))}
    for cap in CAPS:
        for mark in (True, False):
            cut = [cut_prompt(p, tokenizer, cap, mark) for p in prompts]
            out[f"cut_{cap}{'_marked' if mark else ''}"] = statistics.fmean(
                p_search_each(model, tokenizer, cut)
            )
    out["seconds"] = time.perf_counter() - t
    log(f"{name}: {json.dumps({k: round(v, 4) for k, v in out.items()})}")
    return out


def markdown(results: dict[str, Any]) -> str:
    conditions = ["as_collected"] + [f"cut_{c}{s}" for c in CAPS for s in ("_marked", "")]
    heads = ["whole (as collected)"] + [
        f"cut to {c} tokens{' + mark' if s else ', no mark'}" for c in CAPS for s in ("_marked", "")
    ]
    lines = [
        "# Does passage shortening tell the student when to search again?",
        "",
        f"Command: `{results['command']}`. Load average at the end: {results['load_average']}.",
        "",
        f"## Rows: shortened by the fit at max_length {results['max_length']}",
        "",
        "| variant | one-search rows: shortened / all | two-search rows: shortened / all |",
        "|---|---|---|",
    ]
    for v, by in results["rows"].items():
        cells = [f"{by.get(k, {}).get('shortened', 0)} / {by.get(k, {}).get('rows', 0)}" for k in ("1", "2")]
        lines.append(f"| {VARIANTS[v]} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        f"## P(search again) at the {results['prompts']} held-out turn-2 prompts (mean)",
        "",
        "Each passage line of the first results cut to N tokens, with or without the mark the fit appends.",
        "",
        "| model | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for name, f in results["policy"].items():
        lines.append(f"| {name} | " + " | ".join(f"{f[c]:.3g}" for c in conditions) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="The --out folder of bench/demo_ablation_decoupled.py.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--base", default="offline:smollm2", help="The untrained student.")
    p.add_argument("--max_length", type=int, default=1024, help="The ablation's SFT max_length.")
    p.add_argument("--results", default=str(RESULTS))
    args = p.parse_args(argv)
    from bench.probing.probe import turn2_prompts
    from executor_sft.llm.transformers_backend import load_model

    seed_dir = Path(args.out) / f"seed{args.seed}"
    units = {
        v: seed_dir / f"variant-{v}" for v in VARIANTS if (seed_dir / f"variant-{v}" / "student-sft").is_dir()
    }
    _, tokenizer = load_model(args.base)
    rows = {v: rows_figures(u / "sft.jsonl", tokenizer, args.max_length) for v, u in units.items()}
    prompts = turn2_prompts(seed_dir / "ref-teacher" / "eval.jsonl")
    policy = {"base (untrained)": policy_figures(args.base, prompts)}
    for v, u in units.items():
        policy[VARIANTS[v]] = policy_figures(str(u / "student-sft"), prompts)
    results = {
        **provenance("bench/truncation_cue.py", argv),
        "seed": args.seed,
        "max_length": args.max_length,
        "prompts": len(prompts),
        "rows": rows,
        "policy": policy,
    }
    write_results(args.results, results, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
