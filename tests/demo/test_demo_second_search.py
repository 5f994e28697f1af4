"""bench/demo_second_search.py: two-search rows by sub-query type, and P(search again) from a real model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location(
        "demo_second_search", REPO / "bench" / "demo_second_search.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(question: str, searches: int) -> dict:
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "search", "arguments": {}}}],
    }
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": question}]
    for _ in range(searches):
        messages += [call, {"role": "tool", "content": "Doc 1 ..."}]
    return {"messages": [*messages, {"role": "assistant", "content": "<answer>x</answer>"}]}


def test_row_counts_put_two_search_rows_under_their_sub_query_type(tmp_path):
    bench = _bench()
    rows = [_row("plain q", 1), _row("plain q", 2), _row("ambiguous q", 2), _row("unknown q", 2)]
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    types = {"plain q": bench.PLAIN, "ambiguous q": bench.AMBIGUOUS}
    assert bench.row_counts(tmp_path / "sft.jsonl", types) == {
        "rows": 4,
        f"2:{bench.PLAIN}": 1,
        f"2:{bench.AMBIGUOUS}": 1,
        "2:untyped": 1,
    }


@pytest.mark.slow
def test_p_search_is_a_probability_per_type_from_a_real_model():
    from executor_sft.agents.tools import SEARCH_TOOL
    from executor_sft.llm.transformers_backend import load_model

    bench = _bench()
    model, tokenizer = load_model("offline:smollm2")
    messages = [
        {"role": "system", "content": "Answer with the search tool."},
        {"role": "user", "content": "Who directed Paszund?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "Paszund"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "Doc 1 (Title: Paszund) Paszund is a film."},
    ]
    prompts = [(bench.PLAIN, messages, [SEARCH_TOOL]), (bench.AMBIGUOUS, messages, None)]
    got = bench.p_search(model, tokenizer, prompts)
    assert set(got) == {bench.PLAIN, bench.AMBIGUOUS}
    assert all(0.0 < p < 1.0 for p in got.values())
