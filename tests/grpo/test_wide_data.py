"""The wide-data pipeline (WideSeek-R1, Sec. 4, App. C.1): its filter on instances built to fail each
rule, and recipes/build_wide_data.py end to end offline over a synthetic world's tables."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from post_training import run_recipe

from executor_sft.grpo.wide_data import (
    MAX_TARGET_ROWS,
    MIN_TARGET_ROWS,
    build_instance,
    judge_pair,
    minimal_unique_columns,
    retention_report,
)
from executor_sft.metrics.table import render_markdown_table
from executor_sft.synthetic.table_generator import ScriptedTableGenerator, world_tables

HEADER = ["Name", "Team", "Year"]
ROWS = [["Ann", "Red", "1990"], ["Bo", "Red", "1991"], ["Cy", "Blue", "1990"], ["Di", "Blue", "1992"]]


def table(rows, header=HEADER):
    return render_markdown_table(header, rows)


def test_minimal_unique_columns():
    assert minimal_unique_columns(HEADER, ROWS) == ["Name"]
    same_names = [["Ann", "Red", "1990"], ["Ann", "Blue", "1990"], ["Bo", "Red", "1991"]]
    assert minimal_unique_columns(HEADER, same_names) == ["Name", "Team"]
    assert minimal_unique_columns(HEADER, [ROWS[0], ROWS[0]]) is None


def test_agreeing_answers_with_enough_rows_are_kept():
    verdict, unique = judge_pair(table(ROWS), table(list(reversed(ROWS))))
    assert verdict.kept and verdict.agreement == 1.0 and unique == ["Name"]


def test_answers_that_agree_below_0_9_are_dropped():
    # 10 rows x 3 columns; the second answer changes one Team cell in each of 4 rows: item F1 26/30 < 0.9
    rows = [[f"P{i}", "Red", str(1900 + i)] for i in range(10)]
    changed = [[n, "Blue" if i < 4 else t, y] for i, (n, t, y) in enumerate(rows)]
    verdict, _ = judge_pair(table(rows), table(changed))
    assert not verdict.kept and verdict.reason == "inconsistent"
    assert verdict.agreement == pytest.approx(26 / 30)
    # one changed cell of 30 (agreement 29/30 >= 0.9) is kept
    one = [[n, "Blue" if i == 0 else t, y] for i, (n, t, y) in enumerate(rows)]
    assert judge_pair(table(rows), table(one))[0].kept


def test_tables_under_3_rows_are_dropped_even_when_both_answers_agree():
    verdict, _ = judge_pair(table(ROWS[:2]), table(ROWS[:2]))
    assert not verdict.kept and verdict.reason == "too_few_rows" and verdict.agreement == 1.0
    assert judge_pair(table(ROWS[:3]), table(ROWS[:3]))[0].kept


def test_no_table_is_dropped():
    verdict, _ = judge_pair("I could not find this.", table(ROWS))
    assert verdict.reason == "no_table"


def test_instance_draws_its_target_rows_and_asks_twice(tmp_path):
    from executor_sft.grpo.wide_data import SourceTable

    gen = ScriptedTableGenerator([SourceTable("t", "people", HEADER, ROWS)])
    targets = set()
    for s in range(30):
        inst = asyncio.run(build_instance(gen.tables["t"], gen, random.Random(s)))
        targets.add(inst["target_rows"])
        assert MIN_TARGET_ROWS <= inst["target_rows"] <= MAX_TARGET_ROWS
        assert inst["kept"] and inst["answer"] == inst["second_answer"] == table(ROWS)
    assert len(targets) > 5
    report = retention_report([{"kept": True, "reason": None}, {"kept": False, "reason": "inconsistent"}])
    assert report["retained"] == 0.5 and report["dropped"] == {"inconsistent": 1}


@pytest.mark.slow
def test_recipe_offline_end_to_end(tmp_path):
    from executor_sft.data.questions import load_questions
    from executor_sft.synthetic.world import write_world

    world = write_world(tmp_path / "world", seed=0, n_entities=300, n_questions=60, wide_share=0.3)
    n_tables = len(world_tables(world))
    out = tmp_path / "wide" / "data.jsonl"
    spec = json.dumps({"factory": "executor_sft.synthetic.table_generator:scripted_generator",
                       "world": str(tmp_path / "world"), "noise": 0.25})  # fmt: skip
    proc = run_recipe(
        "build_wide_data", "--world", str(tmp_path / "world"), "--generator", spec, "--output", str(out)
    )
    report = json.loads((tmp_path / "wide" / "data.jsonl.report.json").read_text())
    assert report["generated"] == n_tables and 0 < report["kept"] < n_tables
    assert set(report["dropped"]) <= {"inconsistent", "too_few_rows"} and report["dropped"]
    assert f"{report['kept']} of {report['generated']} kept" in proc.stdout
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(kept) == report["kept"]
    for row in kept:
        assert set(row) >= {"question", "answer", "unique_columns"}
        assert row["answer"].count("\n") >= 1 + 3  # header, separator, >= 3 rows
    # the output reads as a questions file of table questions
    assert all(q.answer_format == "table" for q in load_questions(str(out)))
    # nothing is overwritten
    again = run_recipe("build_wide_data", "--world", str(tmp_path / "world"), "--generator", spec,
                       "--output", str(out), expect=2)  # fmt: skip
    assert again.stderr.strip().startswith("error: ") and len(again.stderr.strip().splitlines()) == 1
