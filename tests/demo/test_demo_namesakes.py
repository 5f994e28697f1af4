"""bench/demo_namesakes.py: training rows and held-out runs split by the sub-query's subject kind,
on the committed sample world and its full-filter SFT rows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import load_script

from executor_sft.files import read_jsonl
from executor_sft.synthetic.world import load_world
from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data"
SCRIPT = REPO / "bench" / "demo_namesakes.py"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/demo_namesakes.py")


@pytest.fixture(scope="module")
def world():
    return load_world(DATA / "world")


def _runs() -> list[dict]:
    """One scored run per held-out sub-query: ambiguous ones searched twice and right, plain ones once and wrong."""
    runs = []
    for q in read_jsonl(DATA / "world" / "subqueries_test.jsonl"):
        ambiguous = q["type"] == "single_hop_ambiguous"
        score = {"type": q["type"], "sub_query": q["question"], "n_searches": 2 if ambiguous else 1}
        runs.append({"score": {**score, "em": 1.0 if ambiguous else 0.0}})
    return runs


def test_the_full_filter_rows_search_twice_only_where_a_descriptor_is_named(bench, world):
    rows = list(read_jsonl(DATA / "sft.jsonl"))
    by_kind = bench.training_rows(world, rows)
    assert sum(sum(c.values()) for c in by_kind.values()) == len(rows)
    assert ("unparsed", False) not in by_kind
    twice = {kind: c[2] for kind, c in by_kind.items() if c[2]}
    assert twice, "the sample's SFT rows hold info-gain (two-search) rows"
    assert all(named for (_, named) in twice), twice


def test_held_out_runs_are_grouped_by_type_and_subject_kind(bench, world):
    runs = _runs()
    groups = bench.held_out_runs(world, runs)
    assert sum(g["runs"] for g in groups.values()) == len(runs)
    for (kind_type, subject, named), g in groups.items():
        ambiguous = kind_type == "single_hop_ambiguous"
        assert subject != "unparsed"
        assert g["p2"] == (1.0 if ambiguous else 0.0) and g["em"] == g["p2"]
        assert named or not ambiguous  # every ambiguous sub-query names its namesake's descriptor


def test_the_command_prints_and_writes_both_tables_and_skips_an_unfinished_variant(tmp_path: Path):
    seed = tmp_path / "seed0"
    shutil.copytree(DATA / "world", seed / "world")
    variant = seed / "variant-c"
    (variant / "eval-mean4_t0.6").mkdir(parents=True)
    shutil.copy(DATA / "sft.jsonl", variant / "sft.jsonl")
    (variant / "eval-mean4_t0.6" / "eval.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in _runs()), encoding="utf-8"
    )
    results = tmp_path / "namesakes.md"
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--seeds", "0", "--variants", "c", "a"]
    proc = subprocess.run([*cmd, "--results", str(results)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    assert "seed 0 (a): no evaluation in" in proc.stderr
    assert results.read_text(encoding="utf-8") == proc.stdout
    lines = proc.stdout.splitlines()
    assert any(line.startswith("| 0 | (c) | ambiguous | person, named descriptor |") for line in lines)
    assert not any("| (a) |" in line for line in lines)
