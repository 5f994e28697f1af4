"""Does a trained demo student read the passages, or the sub-query's form? The probe under edits.

    python bench/demo_reads_passages.py --out outputs/demo-ablation --seeds 0 --variants c

Every ambiguous held-out sub-query of the demo names a descriptor ("... Maendgel Sukvarkruth
(film director) ..."), and its first results hold namesakes but not the one it names. On such a
set a student can separate ambiguous from plain sub-queries by reading either. This script reads
the probe of `bench.probing.probe` (P(search again) at the scripted teacher's turn-2 prompt,
one forward pass) on each ambiguous sub-query three ways, side by side:

- `as collected`;
- `gold first`: the first result replaced by the passage of the namesake the descriptor names
  (from the world's corpus), so the answer is on the page; a student that reads the passages
  can answer now;
- `no descriptor`: the descriptor taken out of the sub-query, the results as collected; a student
  that reads the form sees a plain sub-query.

Reading the passages shows as a drop under `gold first`; reading the form, as no drop there and
a drop under `no descriptor`. Prints a markdown table (and writes it to `--results`).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from executor_sft.files import read_jsonl
from executor_sft.llm.transformers_backend import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.probing
from bench.probing.probe import AMBIGUOUS, p_search_each, turn2_prompts  # noqa: E402

DESCRIPTOR = re.compile(r"\s*\(([^)]+)\)")
DOC_LINE = re.compile(r"^Doc (\d+) \(Title: ([^)]*)\) ")


def _edit(prompt, corpus: dict[str, list[str]], how: str):
    """The prompt with its sub-query (user turn) or its first result edited; None if not possible."""
    messages = [dict(m) for m in prompt.messages]
    user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    found = DESCRIPTOR.search(messages[user]["content"])
    if found is None:
        return None
    if how == "no descriptor":
        messages[user]["content"] = DESCRIPTOR.sub("", messages[user]["content"], count=1)
        return replace(prompt, messages=messages)
    tool = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    lines = messages[tool]["content"].split("\n")
    title = DOC_LINE.match(lines[0]).group(2) if DOC_LINE.match(lines[0]) else None
    named = [text for text in corpus.get(title, []) if found.group(1) in text]
    if not named:
        return None
    lines[0] = f"Doc 1 (Title: {title}) {named[0]}"
    messages[tool]["content"] = "\n".join(lines)
    return replace(prompt, messages=messages)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="outputs/demo-ablation", help="what bench/demo_ablation.py wrote")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--variants", nargs="+", default=["c"])
    p.add_argument("--results", default=None, help="also write the table here")
    a = p.parse_args(argv)
    rows = [
        "| seed | variant | ambiguous sub-queries | as collected | gold first | no descriptor |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for seed in a.seeds:
        seed_dir = Path(a.out) / f"seed{seed}"
        corpus: dict[str, list[str]] = {}
        for doc in read_jsonl(seed_dir / "world" / "corpus.jsonl"):
            corpus.setdefault(doc["title"], []).append(doc["text"])
        prompts = turn2_prompts(seed_dir / "ref-teacher" / "eval.jsonl", kinds=[AMBIGUOUS])
        triples = [(q, _edit(q, corpus, "gold first"), _edit(q, corpus, "no descriptor")) for q in prompts]
        triples = [t for t in triples if None not in t]
        for variant in a.variants:
            model_dir = seed_dir / f"variant-{variant}" / "student-sft"
            if not (model_dir / "config.json").is_file():
                print(f"seed {seed} ({variant}): no trained model in {model_dir}; skipped", file=sys.stderr)
                continue
            model, tokenizer = load_model(str(model_dir))
            means = [
                statistics.mean(p_search_each(model, tokenizer, [t[i] for t in triples], progress=True))
                for i in range(3)
            ]
            rows.append(
                f"| {seed} | ({variant}) | {len(triples)} | " + " | ".join(f"{m:.1%}" for m in means) + " |"
            )
    table = "\n".join(rows)
    print(table)
    if a.results:
        command = "python bench/demo_reads_passages.py " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        Path(a.results).write_text(f"Command: `{command.strip()}`\n\n{table}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
