"""SFT rows are checked against the chat protocol before any model loads: every tool message
answers, by its id, a call of the assistant turn before it, and a row ends on an assistant turn."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from rowgen import make_row, write_jsonl

from executor_sft.sft import RowError, read_sft_jsonl, validate_row

REPO = Path(__file__).resolve().parents[2]


def _row(n_searches: int = 1) -> dict:
    # messages: 0 system, 1 user, then (assistant call, tool result) per search, then the report
    return copy.deepcopy(make_row(7, n_searches=n_searches, passage_words=5))


def _tool_first(row):
    row["messages"][2:4] = [row["messages"][3], row["messages"][2]]


def _end_on_tool(row):
    row["messages"].pop()


def _end_on_user(row):
    row["messages"].append({"role": "user", "content": "and then?"})


def _answer_no_call(row):
    row["messages"][3]["tool_call_id"] = "call_elsewhere"


def _answer_twice(row):
    row["messages"].insert(4, dict(row["messages"][3]))


def _tool_after_user(row):
    row["messages"].insert(3, {"role": "user", "content": "never mind"})


@pytest.mark.parametrize(
    ("break_row", "message"),
    [
        (_tool_first, "messages[2].tool_call_id 'call_7_0' answers no open call of the turn before it"),
        (_end_on_tool, "messages[3] is a tool turn: a row must end on an assistant turn"),
        (_end_on_user, "messages[5] is a user turn: a row must end on an assistant turn"),
        (
            _answer_no_call,
            "messages[3].tool_call_id 'call_elsewhere' answers no open call of the turn before it",
        ),
        (_answer_twice, "messages[4].tool_call_id 'call_7_0' answers no open call of the turn before it"),
        (_tool_after_user, "messages[2].tool_calls[0] ('call_7_0') has no tool message answering it"),
    ],
)
def test_a_row_breaking_the_chat_protocol_names_line_and_message(tmp_path, break_row, message):
    bad = _row()
    break_row(bad)
    path = write_jsonl(tmp_path / "sft.jsonl", [_row(), bad])
    with pytest.raises(RowError) as exc:
        read_sft_jsonl(path)
    assert str(exc.value).startswith(f"{path}:2: field ")
    assert message in str(exc.value)


def test_parallel_calls_may_be_answered_in_any_order():
    row = _row()
    call = row["messages"][2]["tool_calls"][0]
    second = {**call, "id": "call_b", "function": {**call["function"], "arguments": '{"query": "b"}'}}
    row["messages"][2]["tool_calls"].append(second)
    answer = row["messages"][3]
    row["messages"][3:4] = [{**answer, "tool_call_id": "call_b"}, answer]
    validate_row(row, "x")
    without_ids = _row(n_searches=2)
    for m in without_ids["messages"]:
        m.pop("tool_call_id", None)
        for c in m.get("tool_calls") or []:
            c.pop("id")
    with pytest.raises(RowError, match=r"messages\[2\]\.tool_calls\[0\] has no id"):
        validate_row(without_ids, "x")  # answered by position is a guess: tests/test_tool_protocol.py


@pytest.mark.slow
def test_the_recipe_stops_on_a_broken_row_with_one_line_before_the_model_loads(tmp_path):
    bad = _row()
    _end_on_tool(bad)
    data = write_jsonl(tmp_path / "sft.jsonl", [_row(), _row(), bad])
    before = data.read_bytes()
    proc = run_script(
        [sys.executable, str(REPO / "recipes/sft_executor.py"), "--model_name_or_path", "offline:tiny-qwen3",
         "--dataset_name", str(data), "--output_dir", str(tmp_path / "model"), "--use_cpu", "true"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {data}:3: field messages[3] is a tool turn: a row must end on an assistant turn "
        "(remove the trailing turns or complete the row)"
    )
    assert not (tmp_path / "model").exists()
    assert data.read_bytes() == before


def test_an_empty_file_says_why_it_may_be_empty_and_what_to_pass(tmp_path):
    """The filter writes an empty sft.jsonl only under --allow_empty; SFT says so in its one line."""
    empty = tmp_path / "sft.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(RowError) as exc:
        read_sft_jsonl(empty)
    message = str(exc.value)
    assert message.startswith(f"{empty}: no rows, nothing to train on;") and "\n" not in message
    assert "--allow_empty true" in message and "--dataset_name" in message
