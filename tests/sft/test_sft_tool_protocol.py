"""Issue 41, point 4, SFT's boundary: a row that breaks the tool protocol is one `file:line`
error before any model loads (the check: `executor_sft.tool_protocol`)."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from rowgen import make_row, write_jsonl

from executor_sft.sft import RowError, read_sft_jsonl
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]


def _shared_id(messages):
    """The search turn makes two calls with the id `call_1`, each answered as `call_1`."""
    call = messages[2]["tool_calls"][0]
    messages[2]["tool_calls"] = [{**call, "id": "call_1"}, {**call, "id": "call_1"}]
    answer = {**messages[3], "tool_call_id": "call_1"}
    messages[3:4] = [answer, dict(answer)]


def _list_arguments(messages):
    messages[2]["tool_calls"][0]["function"]["arguments"] = json.dumps("[1, 2]")


def _no_tool_call_id(messages):
    messages[3].pop("tool_call_id")


def _unanswered(messages):
    del messages[3]


def _row(break_messages=None) -> dict:
    row = copy.deepcopy(make_row(7, n_searches=1, passage_words=5))
    if break_messages is not None:
        break_messages(row["messages"])
    return row


def test_a_generated_row_keeps_the_protocol(tmp_path):
    assert len(read_sft_jsonl(write_jsonl(tmp_path / "sft.jsonl", [_row(), _row()]))) == 2


@pytest.mark.parametrize(
    ("break_messages", "problem"),
    [
        (_shared_id, "messages[2].tool_calls[1] repeats the id 'call_1'"),
        (_list_arguments, "messages[2].tool_calls[0].function.arguments is not a JSON object"),
        (_no_tool_call_id, "messages[3] is a tool message without a tool_call_id"),
        (_unanswered, "messages[2].tool_calls[0] ('call_7_0') has no tool message answering it"),
    ],
)
def test_a_row_breaking_the_protocol_is_refused_naming_file_line_and_message(
    tmp_path, break_messages, problem
):
    path = write_jsonl(tmp_path / "sft.jsonl", [_row(), _row(break_messages)])
    with pytest.raises(RowError) as info:
        read_sft_jsonl(path)
    assert str(info.value).startswith(f"{path}:2: field {problem}")


@pytest.mark.slow
def test_the_recipe_stops_on_shared_call_ids_with_one_line(tmp_path):
    data = write_jsonl(tmp_path / "sft.jsonl", [_row(), _row(_shared_id)])
    before = data.read_bytes()
    proc = run_script(
        [sys.executable, str(REPO / "recipes/sft_executor.py"), "--model_name_or_path", "offline:tiny-qwen3",
         "--dataset_name", str(data), "--output_dir", str(tmp_path / "model"), "--use_cpu", "true"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert proc.stderr.strip() == (
        f"error: {data}:2: field messages[2].tool_calls[1] repeats the id 'call_1': "
        "every call of a turn needs its own id"
    )
    assert not (tmp_path / "model").exists() and data.read_bytes() == before
