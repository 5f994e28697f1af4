"""docs/rollout.md's summary example: every figure of its two tables is what `render_summary`
prints for the sample collection `data/rollouts.jsonl` (and its shipped summary file)."""

from __future__ import annotations

import json
import re

from executor_sft.rollout.summary import collection_stats, render_summary
from executor_sft.schema import Episode
from executor_sft.store import read_episodes
from tests.support.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "rollout.md"
LEAD = "For the sample collection\n`data/rollouts.jsonl`"


def _doc_tables(text: str) -> list[list[list[str]]]:
    """The two plain blocks after the lead-in, as rows of cells (columns are 2+ spaces apart)."""
    assert LEAD in text, "docs/rollout.md no longer shows the sample collection's summary"
    after = text.split(LEAD, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```\n(.*?)^```", after, re.M | re.S)
    return [[re.split(r"\s{2,}", line.strip()) for line in block.splitlines()] for block in blocks]


def _rendered_tables(rendered: str) -> list[list[list[str]]]:
    """Header and body rows of each table `render_summary` draws (rich's box characters)."""
    tables, rows = [], None
    for line in rendered.splitlines():
        if line.startswith(("┏", "┃", "┡", "│", "└")) and rows is None:
            rows = []
        if rows is None:
            continue
        if line.startswith(("┃", "│")):
            rows.append([c.strip() for c in re.split(r"[┃│]", line)[1:-1]])
        elif line.startswith("└"):
            tables.append(rows)
            rows = None
    return tables


def _sample_summary() -> dict:
    summary = collection_stats(
        Episode.model_validate(e) for e in read_episodes(REPO_ROOT / "data" / "rollouts.jsonl")
    )
    return summary.to_dict()


def test_every_figure_of_the_summary_example_is_what_the_sample_collection_prints():
    summary = _sample_summary()
    shipped = json.loads((REPO_ROOT / "data" / "rollouts.summary.json").read_text(encoding="utf-8"))
    assert {k: shipped[k] for k in summary} == summary  # the shipped file is this collection's summary
    rendered = render_summary(summary)
    assert (
        rendered.splitlines()[0].strip()
        == f"{summary['episodes']} episodes over {summary['questions']} questions"
    )
    assert f"\n`data/rollouts.jsonl` ({summary['questions']} questions" in PAGE.read_text(encoding="utf-8")
    assert _doc_tables(PAGE.read_text(encoding="utf-8")) == _rendered_tables(rendered)


def test_a_changed_figure_fails_the_comparison():
    text = PAGE.read_text(encoding="utf-8")
    doc = _doc_tables(text)
    assert len(doc) == 2 and doc[1][2] == ["teacher", "89", "1.43", "57.3%", "42.7%"]
    changed = text.replace(
        "teacher           89                 1.43", "teacher           89                 1.44"
    )
    assert _doc_tables(changed) != _rendered_tables(render_summary(_sample_summary()))
