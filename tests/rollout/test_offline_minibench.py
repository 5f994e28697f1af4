"""The shipped offline collection config on real data: the oracle backbone dispatches MuSiQue
gold hops to real SmolLM2 executors over real BM25, and the filter's report accounts for every
executor run (kept in a stratum, or excluded with a reason)."""

from __future__ import annotations

import json

import pytest
import yaml
from script_modules import load_script

from executor_sft.eval.runner import ensure_index
from tests.support import cache_dir
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread: on a shared, busy 2-core host two spinning threads were ~5x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _recipe(name: str):
    return load_script(f"recipes/{name}.py")


def test_offline_collect_config_runs_executors_and_the_filter_counts_every_run(
    tmp_path, minibench_questions_path, minibench_corpus_path
):
    index = ensure_index(cache_dir() / "indexes" / "minibench-bm25", minibench_corpus_path)
    cfg = yaml.safe_load((REPO_ROOT / "recipes/configs/collect_minibench_offline.yaml").read_text())
    assert cfg["models"]["backbone"]["backend"] == "oracle"
    # The shipped config, shrunk: one question, one hop, short replies.
    cfg["questions"].update(path=str(minibench_questions_path), limit=1)
    cfg["retriever"].update(index=str(index), corpus=str(minibench_corpus_path))
    cfg["models"]["backbone"]["questions"] = str(minibench_questions_path)
    cfg["pipeline"]["max_rounds"] = 1
    for role in ("teacher", "student"):
        cfg["pipeline"]["roles"][role]["sampling"]["max_tokens"] = 32
    cfg["output_dir"] = str(tmp_path / "collect")
    path = tmp_path / "collect.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert _recipe("collect_rollouts").main(["--config", str(path)]) == 0

    rollouts = tmp_path / "collect" / "rollouts.jsonl"
    episodes = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert len(episodes) == 1 and episodes[0]["question"]["dataset"] == "musique"
    first_hop = episodes[0]["question"]["decomposition"][0]["question"]
    assert episodes[0]["rounds"][0]["sub_queries"] == [" ".join(first_hop.split())]
    n_runs = sum(len(e["runs"]) for e in episodes)
    assert {r["role"] for r in episodes[0]["runs"]} >= {"teacher", "student"}

    report_path = tmp_path / "report.json"
    argv = [
        "--rollouts",
        str(rollouts),
        "--output",
        str(tmp_path / "sft.jsonl"),
        "--report",
        str(report_path),
    ]
    # SmolLM2's runs are rarely correct, so no row may be kept: --allow_empty writes the report anyway
    assert _recipe("filter_trajectories").main([*argv, "--no_require_judge", "--allow_empty", "true"]) == 0
    report = json.loads(report_path.read_text())
    totals = report["totals"]
    assert totals["episodes"] == 1 and totals["runs"] == n_runs
    assert totals["rows"] + totals["excluded"] == n_runs
    assert sum(report["exclusions"].values()) == totals["excluded"]
    assert sum(s["records"] for s in report["strata"].values()) == totals["rows"]
    assert len((tmp_path / "sft.jsonl").read_text().splitlines()) == totals["rows"]
