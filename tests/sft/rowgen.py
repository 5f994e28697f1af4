"""Executor SFT rows built programmatically (a fictional world), in the sft.jsonl format.

Used by the tests, and to write the placeholder `data/sft.jsonl` until the project's
synthetic pipeline produces the real one (`python -m tests.sft.rowgen data/sft.jsonl`).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from executor_sft.agents.tools import SEARCH_TOOL

SYSTEM = (
    "You answer one sub-question by searching a corpus. Call the search tool, read the passages, "
    "search again if they leave a gap, then reply with <answer>...</answer><evidence>...</evidence>."
)
_PEOPLE = ["Ilsa Varn", "Tomas Quell", "Mira Odett", "Henrik Salo", "Anya Brek", "Corin Vale", "Lute Marrow"]
_PLACES = ["Eldham", "Port Saffre", "Kessin", "Varrow Bay", "Ostrel", "Tamberlin", "Glenmoor"]
_WORKS = ["The Glass Orchard", "Salt and Ember", "Nine Winters", "The Quiet Harbour", "Lanterns of Kessin"]
_FILLER_TEXT = (
    "the council records of that year mention a long dispute over the harbour tolls and the mill rights "
    "which was settled only after two seasons of negotiation between the guilds and the town assembly"
)
_FILLER = _FILLER_TEXT.split()


def _passage(rng: random.Random, i: int, title: str, fact: str, words: int) -> str:
    filler = " ".join(rng.choice(_FILLER) for _ in range(words))
    return f"Doc {i} (Title: {title}) {fact} {filler}."


def make_row(seed: int, n_searches: int = 1, passage_words: int = 40, k: int = 3) -> dict:
    """One executor trajectory: system, sub-query, n_searches tool calls + results, report."""
    rng = random.Random(seed)
    person, place, work = rng.choice(_PEOPLE), rng.choice(_PLACES), rng.choice(_WORKS)
    year = rng.randint(1801, 1999)
    question = f"In which town was the author of {work} born?"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    queries = [f"{work} author", f"{person} birthplace"][:n_searches] + [
        f"{person} early life {i}" for i in range(max(0, n_searches - 2))
    ]
    for turn, query in enumerate(queries):
        call_id = f"call_{seed}_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "search", "arguments": json.dumps({"query": query})},
                    }
                ],
            }
        )
        facts = [
            f"{work} is a novel written by {person} in {year}.",
            f"{person} was born in {place} and later moved to the coast.",
        ]
        docs = [
            _passage(rng, d + 1, rng.choice([work, person, place]), facts[(turn + d) % 2], passage_words)
            for d in range(k)
        ]
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "name": "search", "content": "\n".join(docs)}
        )
    messages.append(
        {
            "role": "assistant",
            "content": f"<answer>{place}</answer><evidence>{work} was written by {person}, "
            f"who was born in {place}.</evidence>",
        }
    )
    stratum = "single_search" if n_searches == 1 else "info_gain_multi_search"
    return {
        "messages": messages,
        "tools": [SEARCH_TOOL],
        "stratum": stratum,
        "source_run_id": f"run-{seed}",
        "question_id": f"q{seed}",
        "dataset": rng.choice(["hotpotqa", "2wiki", "musique"]),
    }


def make_rows(n: int, seed: int = 0, passage_words: int = 40) -> list[dict]:
    return [make_row(seed + i, n_searches=1 + (i % 2), passage_words=passage_words) for i in range(n)]


def write_jsonl(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def trained_segments(example, tokenizer) -> list[str]:
    """Decoded maximal runs of trained tokens."""
    segments, cur = [], []
    for tok, lab in zip(example["input_ids"], example["labels"], strict=True):
        if lab != -100:
            assert lab == tok, "a trained label must equal its input token"
            cur.append(tok)
        elif cur:
            segments.append(tokenizer.decode(cur))
            cur = []
    if cur:
        segments.append(tokenizer.decode(cur))
    return segments


if __name__ == "__main__":
    write_jsonl(sys.argv[1] if len(sys.argv) > 1 else "data/sft.jsonl", make_rows(48))
