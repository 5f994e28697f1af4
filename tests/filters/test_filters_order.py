"""The filter recipe's output is a function of the set of episodes, not of the order a file holds
them in (engines write episodes as they finish; shards merge in any order)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from executor_sft.filters import FilterConfig, filter_episodes, iter_jsonl
from tests.support.recipes import filter_recipe_output

REPO = Path(__file__).resolve().parents[2]
ROLLOUTS = REPO / "data" / "rollouts.jsonl"


@pytest.mark.slow
def test_the_same_episodes_in_two_orders_give_byte_identical_output(tmp_path):
    lines = ROLLOUTS.read_bytes().splitlines(keepends=True)
    files = []
    for seed in (0, 1):
        order = lines[:]
        random.Random(seed).shuffle(order)
        assert order != lines
        files.append(tmp_path / f"shuffled-{seed}.jsonl")
        files[-1].write_bytes(b"".join(order))
    in_file_order = [filter_episodes(iter_jsonl(f), FilterConfig()).rows for f in files]
    assert in_file_order[0] != in_file_order[1]  # read in file order, the two files' rows differ

    outputs = []
    for i, rollouts in enumerate(files):
        (tmp_path / f"out{i}").mkdir()
        outputs.append(filter_recipe_output(rollouts, tmp_path / f"out{i}"))
    assert outputs[0] == outputs[1]
    committed = (REPO / "data" / "sft.jsonl").read_bytes() + (REPO / "data" / "sft.report.json").read_bytes()
    assert outputs[0] == committed  # data/rollouts.jsonl is in id order: its rows, byte for byte
