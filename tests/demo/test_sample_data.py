"""The committed sample data (data/) is what `recipes/make_sample_data.py` generates, byte for byte."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from executor_sft.demos.sample_data import SampleConfig, make_sample_data
from executor_sft.sft import DEFAULT_SFT_DATA, read_sft_jsonl

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    result = make_sample_data(out, index_dir=out.parent / "sample-index", show_progress=False)
    return out, result


@pytest.mark.slow
def test_regeneration_is_byte_identical_to_the_committed_sample(regenerated):
    out, result = regenerated
    assert result.rows > 0
    for name in ["rollouts.jsonl", "sft.jsonl", "sft.report.json", "rollouts.summary.json"] + [
        f"world/{f}"
        for f in json.loads((DATA / "world" / "world.json").read_text())["files"] + ["world.json"]
    ]:
        assert (out / name).read_bytes() == (DATA / name).read_bytes(), f"{name} differs from data/{name}"


@pytest.mark.slow
def test_a_different_seed_gives_different_rows(tmp_path):
    cfg = SampleConfig(seed=1, entities=120, questions=20, collect_questions=6)
    result = make_sample_data(tmp_path, cfg, index_dir=tmp_path / "index", show_progress=False)
    assert result.sft.read_bytes() != (DATA / "sft.jsonl").read_bytes()


def test_sample_is_the_sft_default_small_and_holds_both_strata():
    assert DEFAULT_SFT_DATA == DATA / "sft.jsonl"
    rows = read_sft_jsonl(DEFAULT_SFT_DATA)
    strata = Counter(r["stratum"] for r in rows)
    assert strata["single_search"] > 0 and strata["info_gain_multi_search"] > 0
    report = json.loads((DATA / "sft.report.json").read_text())
    assert report["totals"]["rows"] == len(rows)
    size = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file())
    assert size < 3_000_000, f"data/ is {size} bytes; keep the sample small"


def test_no_held_out_sub_query_is_trained_on():
    held_out = {json.loads(line)["question"] for line in (DATA / "world" / "subqueries_test.jsonl").open()}
    trained = {
        m["content"] for r in read_sft_jsonl(DEFAULT_SFT_DATA) for m in r["messages"] if m["role"] == "user"
    }
    assert held_out and not (held_out & trained)
