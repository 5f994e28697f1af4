"""Composition report numbers (records / unique questions per dataset x stratum) and its tables."""

from __future__ import annotations

import json

from filters_helpers import as_dicts, episode, run
from rich.console import Console

from executor_sft.filters import EpisodeFilter, FilterConfig, filter_episodes, print_report


def _episodes():
    def ig(prefix, sqi=0):
        return [
            run(f"{prefix}t", "teacher", 2, sub_query_index=sqi),
            run(
                f"{prefix}b",
                "teacher_budget1",
                1,
                em=0.0,
                counterfactual_of=f"{prefix}t",
                sub_query_index=sqi,
            ),
        ]

    return as_dicts(
        episode("e1", [run("e1s", "student", 1), *ig("e1", 1)], qid="q1", dataset="hotpotqa"),
        episode("e2", [run("e2s", "student", 1)], qid="q1", dataset="hotpotqa"),  # second sample of q1
        episode("e3", [run("e3t", "teacher", 1)], qid="q2", dataset="hotpotqa"),
        # same id in another dataset: a different question
        episode("e4", [*ig("e4"), run("e4x", "teacher", 3, sub_query_index=1)], qid="q1", dataset="musique"),
    )


def test_composition_numbers():
    report = filter_episodes(_episodes()).report
    assert report["totals"] == {"episodes": 4, "runs": 8, "rows": 5, "unique_questions": 3, "excluded": 3}
    assert report["strata"] == {
        "single_search": {"records": 3, "unique_questions": 2, "by_role": {"student": 2, "teacher": 1}},
        "info_gain_multi_search": {"records": 2, "unique_questions": 2, "by_role": {"teacher": 2}},
    }
    assert report["datasets"] == {
        "hotpotqa": {
            "single_search": {"records": 3, "unique_questions": 2},
            "info_gain_multi_search": {"records": 1, "unique_questions": 1},
            "total": {"records": 4, "unique_questions": 2},
        },
        "musique": {
            "single_search": {"records": 0, "unique_questions": 0},
            "info_gain_multi_search": {"records": 1, "unique_questions": 1},
            "total": {"records": 1, "unique_questions": 1},
        },
    }
    assert list(report["exclusions"].items()) == [("counterfactual_role", 2), ("no_counterfactual", 1)]
    assert report["config"] == FilterConfig().to_dict()
    json.dumps(report)  # JSON-ready


def test_report_follows_config():
    cfg = FilterConfig(strata=["single_search"], require_judge=False)
    report = filter_episodes(_episodes(), cfg).report
    assert list(report["strata"]) == ["single_search"]
    assert report["config"]["require_judge"] is False
    assert report["exclusions"]["stratum_disabled"] == 2


def test_streaming_filter_report_matches_batch():
    filt = EpisodeFilter()
    rows = [r for ep in _episodes() for r in filt.process(ep)]
    assert len(rows) == 5
    assert filt.report.to_dict() == filter_episodes(_episodes()).report


def test_console_tables():
    report = filter_episodes(_episodes()).report
    console = Console(record=True, width=140)
    print_report(report, console)
    text = console.export_text()
    hotpot = next(line for line in text.splitlines() if "hotpotqa" in line)
    assert [c.strip() for c in hotpot.strip("│ ").split("│")] == ["hotpotqa", "3 / 2", "1 / 1", "4 / 2"]
    total = next(line for line in text.splitlines() if line.strip("│ ").startswith("total"))
    assert "5 / 3" in total
    assert "no_counterfactual" in text and "Excluded runs (3 of 8)" in text
