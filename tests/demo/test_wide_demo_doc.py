"""docs/wide.md's measured demo: its command run as written, and every figure the page quotes
from its output compared with what the run prints (the table, the notes under it, the prose)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from executor_sft.demos.wide_demo import WORLD
from tests.support.paths import REPO_ROOT
from tests.support.recipes import stderr_tail

PAGE = REPO_ROOT / "docs" / "wide.md"
COMMAND = "python -m executor_sft.demos.wide_demo --out runs/wide-demo"
SECTION = "## Demo: width against depth (measured)"
DOC_COLUMNS = ["axis", "P", "T", "K", "item F1", "row F1", "success", "rounds/q", "sub-agents/q",
               "sub-agent tokens/q"]  # fmt: skip
RUN_COLUMNS = {  # the page's column -> the column of the run's table it quotes
    "item F1": "item F1 Avg@1",
    "row F1": "row F1 Avg@1",
    "success": "success Avg@1",
}
SAME = [("item F1 Avg@1", "item F1 Max@1"), ("row F1 Avg@1", "row F1 Max@1"),
        ("success Avg@1", "success Pass@1")]  # fmt: skip  # "with one sample Max@1 and Pass@1 equal Avg@1"
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def _table(text: str) -> list[dict[str, str]]:
    """The first Markdown table of `text` as rows of header -> cell."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "").strip()) <= set("-: "), lines[1]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[str, object]:
    """The page's command, run as written (its --out under a temporary directory)."""
    cwd = tmp_path_factory.mktemp("wide-demo")
    section = _section()
    assert f"\n{COMMAND}\n" in section, "the page no longer documents this command"
    proc = subprocess.run(
        [sys.executable, *COMMAND.split()[1:], "--no_progress"],
        cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    return proc.stdout, cwd / "runs" / "wide-demo"


@pytest.mark.slow
def test_every_figure_of_the_table_is_what_the_demo_prints(run):
    stdout, _ = run
    doc = _table(_section())
    measured = _table(stdout)
    assert list(doc[0]) == DOC_COLUMNS
    assert len(doc) == len(measured) == 16
    for written, got in zip(doc, measured, strict=True):
        for column in DOC_COLUMNS:
            assert written[column] == got[RUN_COLUMNS.get(column, column)], (
                f"docs/wide.md, row {written['axis']} P={written['P']} T={written['T']} K={written['K']}, "
                f"{column}: written {written[column]}, measured {got[RUN_COLUMNS.get(column, column)]}"
            )
        assert [got[a] == got[b] for a, b in SAME] == [True] * len(SAME), got
        assert got["EM (text)"] == "–"  # the demo's questions are all tables


@pytest.mark.slow
def test_every_figure_of_the_prose_is_what_the_demo_prints(run):
    stdout, out = run
    section = _section()
    rows = {(r["axis"], int(r["P"]), int(r["T"]), int(r["K"])): r for r in _table(stdout)}
    width = {p: r for (axis, p, _, _), r in rows.items() if axis == "width"}
    depth_t = {t: r for (axis, _, t, _), r in rows.items() if axis == "depth (T)"}
    depth_k = {k: r for (axis, _, _, k), r in rows.items() if axis == "depth (K)"}

    # "17 wide tasks of 3 to 11 cities" (the world the demo writes), "k = 1 sample"
    questions = [json.loads(line) for line in (out / "world" / "questions.jsonl").open()]
    tables = [q["golden_answers"][0].count("\n") - 1 for q in questions if q.get("unique_columns")]
    m = re.search(r"(\d+) wide tasks of (\d+)\s+to (\d+) cities", section)
    assert (int(m[1]), int(m[2]), int(m[3])) == (len(tables), min(tables), max(tables))
    assert f"{len(tables)} table questions, 0 text questions, k = 1 samples each." in stdout
    assert "k = 1 sample" in section

    # "item F1 rises with width from A (P = 1) to B (P = 10) and success from C to D"
    m = re.search(
        r"item F1 rises with width from ([\d.]+) \(P = 1\) to ([\d.]+)\s+\(P = 10\) and success from ([\d.]+) to ([\d.]+)",
        section,
    )
    assert m, "the paragraph's claim about width changed: update this test with it"
    assert m.groups() == (width[1]["item F1 Avg@1"], width[10]["item F1 Avg@1"],
                          f"{float(width[1]['success Avg@1']):g}", width[10]["success Avg@1"])  # fmt: skip
    # "The depth-only K line is flat after K = 3"
    assert {depth_k[k]["item F1 Avg@1"] for k in (3, 5, 10)} == {depth_k[3]["item F1 Avg@1"]}
    assert float(depth_k[2]["item F1 Avg@1"]) < float(depth_k[3]["item F1 Avg@1"])
    # "T = 9 reaches what P = 4 reaches in 3 rounds, and T = 11 stays below P = 6"
    assert "T = 9 reaches what P = 4 reaches" in section and "T = 11 stays below P = 6" in section
    assert depth_t[9]["item F1 Avg@1"] == width[4]["item F1 Avg@1"]
    assert float(depth_t[11]["item F1 Avg@1"]) < float(width[6]["item F1 Avg@1"])

    # "seed 0, 800 entities, 200 questions, `wide_share` 0.3": the world the demo writes
    m = re.search(r"seed (\d+), (\d+) entities, (\d+) questions, `wide_share` ([\d.]+)", section)
    assert m and m.groups() == tuple(
        str(WORLD[k]) for k in ("seed", "n_entities", "n_questions", "wide_share")
    )

    # docs/results.md's row quotes the same run
    results = (REPO_ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    row = next(line for line in results.splitlines() if "wide.md#demo-width-against-depth-measured" in line)
    assert f"({len(tables)} tables of {min(tables)}-{max(tables)} cities)" in row
    assert (
        f"item F1 {width[1]['item F1 Avg@1']} → {width[10]['item F1 Avg@1']} and success 0 → "
        f"{width[10]['success Avg@1']} from P = 1 to 10" in row
    )
    assert f"(K 3 → 10) leave it at {depth_k[10]['item F1 Avg@1']} |" in row
    assert [
        f for f in re.findall(r"\b\d+\.\d\b", row) if f not in {c for r in rows.values() for c in r.values()}
    ] == []

    # No other decimal figure: each one the section writes outside the table is a cell of the run.
    prose = "\n".join(line for line in section.splitlines() if not line.startswith("|"))
    prose = re.sub(r"Sec\. [\d.]+|`wide_share` [\d.]+", "", prose)  # a seed's section, the setting above
    cells = {c for r in rows.values() for c in r.values()}
    assert [f for f in re.findall(r"\b\d+\.\d\b", prose) if f not in cells] == []
