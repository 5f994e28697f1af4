"""bench/truncation_cue.py's measures: which rows the fit shortens, by searches, and the cut prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_modules import load_script

from executor_sft.llm.backends import load_tokenizer
from executor_sft.sft.length import fit_row

ROWS = Path(__file__).parents[2] / "data" / "sft.jsonl"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("offline:smollm2")


def test_the_rows_count_shortened_ones_by_their_searches(tokenizer, tmp_path):
    cue = load_script("bench/truncation_cue.py")
    rows = [json.loads(line) for line in ROWS.read_text(encoding="utf-8").splitlines()]
    one = next(r for r in rows if cue.searches(r) == 1)
    two = next(r for r in rows if cue.searches(r) == 2)
    n_one, n_two = (len(fit_row(r, tokenizer, None).example["input_ids"]) for r in (one, two))
    assert n_one < n_two
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(one) + "\n" + json.dumps(two) + "\n", encoding="utf-8")
    figures = cue.rows_figures(data, tokenizer, max_length=max(n_one, n_two - 40))
    assert figures == {
        "1": {"rows": 1, "shortened": 0, "dropped": 0},
        "2": {"rows": 1, "shortened": 1, "dropped": 0},
    }


def test_a_cut_prompt_shortens_long_passage_lines_only(tokenizer):
    cue = load_script("bench/truncation_cue.py")
    from bench.probing.probe import Turn2Prompt

    long_line = "Doc 1 (Title: A) " + "word " * 80
    tool = {"role": "tool", "content": long_line + "\nDoc 2 (Title: B) short."}
    prompt = Turn2Prompt("person", [{"role": "user", "content": "word " * 80}, tool], None, "q")
    marked = cue.cut_prompt(prompt, tokenizer, 20, mark=True)
    first, second = marked.messages[1]["content"].split("\n")
    assert first.endswith(cue.MARK) and first.startswith("Doc 1 (Title: A)")
    assert len(tokenizer(first.removesuffix(cue.MARK), add_special_tokens=False)["input_ids"]) <= 21
    assert second == "Doc 2 (Title: B) short."
    assert marked.messages[0] == prompt.messages[0]  # only tool messages are cut
    bare = cue.cut_prompt(prompt, tokenizer, 20, mark=False)
    assert cue.MARK not in bare.messages[1]["content"]
