"""bench/demo_second_search.py: two-search rows by sub-query type (its probe is tested in test_probe.py)."""

from __future__ import annotations

import json
from pathlib import Path

from script_modules import load_script

REPO = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("bench/demo_second_search.py")


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
