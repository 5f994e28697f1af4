"""Why a demo student does or does not search twice: its training rows and its turn-2 choice.

    python bench/demo_second_search.py --out outputs/demo-ablation --seeds 0 1 2

Reads what `bench/demo_ablation.py` left per seed (each variant's `sft.jsonl` and trained
`student-sft/`, the scripted teacher's evaluation runs, the world's sub-query types) and
reports, per variant:

- its SFT rows: how many, and how many two-search rows sit on plain sub-queries (needless
  second searches) and on ambiguous ones (needed);
- P(search again): at the teacher's exact turn-2 prompt of each held-out sub-query (the
  request after its first search, tools included), the model's probability of opening a
  `<tool_call>` rather than an `<answer>`, p_tool / (p_tool + p_answer) over the two
  continuations' sequence probabilities. Greedy decoding searches twice when it is > 0.5;
  the mean over plain and over ambiguous sub-queries shows whether training moved the
  decision towards the right type even where greedy decoding never crosses.

The untrained student is the reference row. Writes markdown to `--results`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from executor_sft.jsonl import read_jsonl
from executor_sft.llm.transformers_backend import load_model, render_prompt

PLAIN, AMBIGUOUS = "single_hop", "single_hop_ambiguous"
CHOICES = ("<tool_call>", "<answer>")
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


def turn2_prompts(seed_dir: Path) -> list[tuple[str, list[dict], list[dict] | None]]:
    """(type, messages, tools) of the scripted teacher's second call on each evaluated sub-query."""
    out = []
    for row in read_jsonl(seed_dir / "ref-teacher" / "eval.jsonl"):
        calls = row["run"]["calls"]
        if len(calls) >= 2:
            out.append((row["score"]["type"], calls[1]["messages"], calls[1].get("tools")))
    return out


@torch.no_grad()
def p_search(model, tokenizer, prompts) -> dict[str, float]:
    """Mean P(<tool_call> | prompt) against <answer>, per sub-query type."""
    by_type: dict[str, list[float]] = {}
    for kind, messages, tools in tqdm(prompts, desc="turn-2 prompts", leave=False):
        prefix = render_prompt(tokenizer, messages, tools, enable_thinking=False)
        logps = []
        for choice in CHOICES:
            p_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
            c_ids = tokenizer(prefix + choice, add_special_tokens=False)["input_ids"][len(p_ids) :]
            ids = torch.tensor([p_ids + c_ids])
            # Only the positions that predict the continuation: the full vocabulary over every
            # prompt position would dominate the cost.
            logits = model(ids, logits_to_keep=len(c_ids) + 1).logits[0, :-1].float().log_softmax(-1)
            logps.append(logits.gather(1, torch.tensor(c_ids)[:, None]).sum().item())
        by_type.setdefault(kind, []).append(1.0 / (1.0 + torch.tensor(logps[1] - logps[0]).exp().item()))
    return {k: statistics.mean(v) for k, v in by_type.items()}


def _cell(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    if not values:
        return "-"
    mean = statistics.mean(values) * scale
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values) * scale:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        prompts = turn2_prompts(seed_dir)
        for key in a.models:
            path = a.model if key == "untrained" else str(seed_dir / f"variant-{key}" / "student-sft")
            if key != "untrained" and not Path(path).is_dir():
                print(f"[second-search] seed {seed}: no {path}; skipped", file=sys.stderr)
                continue
            model, tokenizer = load_model(path)
            probs = p_search(model, tokenizer, prompts)
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
