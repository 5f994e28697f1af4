"""Wall times of documented commands live in one table (docs/timings.md); other pages link to it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMINGS = REPO / "docs" / "timings.md"
RECORD = REPO / "bench" / "results" / "timings.md"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"timings\.md#([\w-]+)")


def _table_rows(page: Path) -> list[str]:
    return [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]


def test_every_timings_link_names_a_row():
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', TIMINGS.read_text(encoding="utf-8")))
    for page in PAGES:
        for anchor in LINK.findall(page.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{page.name}: timings.md#{anchor} is not a row of docs/timings.md"


def test_each_row_says_the_machine_state_and_the_record_says_who_measured():
    """docs/timings.md is reference (no commits or dates); bench/results/timings.md is the record."""
    rows = _table_rows(TIMINGS)[1:]
    assert rows, "no table"
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 4 and cells[3], f"what | command | wall time | machine state: {row}"
    for row in _table_rows(RECORD)[1:]:
        source = [c.strip() for c in row.strip("|").split("|")][-1]
        assert re.search(r"\b[0-9a-f]{7}\b, 20\d\d-\d\d-\d\d|issue #\d+|session, 20\d\d", source), row


# Wall times that README and docs used to quote in several places (and disagree on): each is in
# the reference table or the record, and no other page restates it.
ONCE = ["152 s", "525 s", "395 s", "343 s", "8 min 24 s", "17.7 min", "22.8 min", "42.3 min", "82.9 min"]
ONCE += ["73.1 min", "3 min 53 s", "19 min 27 s", "288 s", "12 min 40 s", "1,571 s"]


def test_no_other_page_restates_a_wall_time_of_the_table():
    tables = TIMINGS.read_text(encoding="utf-8") + RECORD.read_text(encoding="utf-8")
    assert [f for f in ONCE if f not in tables] == []
    for page in PAGES:
        if page == TIMINGS:
            continue
        text = page.read_text(encoding="utf-8")
        repeated = [f for f in ONCE if re.search(rf"(?<![\w.,]){re.escape(f)}(?![\w/])", text)]
        stale = re.findall(r"~\d+ min\b|6\.4 minutes", text)  # the old "~18 min" / "6.4 minutes" kind
        assert not repeated and not stale, (
            f"{page.relative_to(REPO)} restates {repeated + stale}: link to docs/timings.md instead"
        )


FIGURE = re.compile(r"\d+(?:[.,]\d+)*")


def _holds(text: str, figure: str) -> bool:
    """`figure` appears in `text` as a whole number ("0.5" is not found in "10.55")."""
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?!\d|[.,]\d)", text) is not None


def headline_problems(readme: str, root: Path = REPO) -> list[str]:
    """Each figure of the README's headline table, in the "what" or the "result" cell, that is
    not, as written, in a bench result its row links (or in docs/timings.md)."""
    table = readme.split("## Headline results", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert 0 < len(rows) <= 8, "the headline table keeps 1 to 8 rows"
    timings = (root / "docs" / "timings.md").read_text(encoding="utf-8")
    problems = []
    for row in rows:
        what, result, bench = (c.strip() for c in row.strip("|").split("|"))
        sources = re.findall(r"\]\(([^)#]+)", bench)
        assert sources, f"no bench result linked: {row}"
        where = "".join((root / s).read_text(encoding="utf-8") for s in sources) + timings
        for cell in (what, re.sub(r"\]\([^)]*\)", "]", result)):  # link targets are not figures
            problems += [
                f"README headline {figure!r} is not in {', '.join(sources)} or docs/timings.md: {row[:80]}"
                for figure in FIGURE.findall(cell)
                if not _holds(where, figure)
            ]
    return problems


def test_every_headline_figure_is_in_the_result_it_links():
    """Every number of the README's headline results appears, as written, in the bench results
    its row links (or in docs/timings.md), so the front page cannot drift from what was measured."""
    assert headline_problems((REPO / "README.md").read_text(encoding="utf-8")) == []


def test_a_headline_figure_missing_from_its_result_is_named(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "timings.md").write_text("| 12 s |\n", encoding="utf-8")
    (tmp_path / "r.md").write_text("R@5 0.595 on 3 seeds, 10.55 s\n", encoding="utf-8")
    readme = (
        "## Headline results\n\n| what | result | bench |\n|---|---|---|\n"
        "| R@5, 3 seeds | 0.595 in 12 s, see [x](docs/x.md#y) | [r](r.md) |\n"
        "| 4 seeds | 0.5 | [r](r.md) |\n"
    )
    assert headline_problems(readme, tmp_path) == [
        f"README headline {f!r} is not in r.md or docs/timings.md: | 4 seeds | 0.5 | [r](r.md) |"
        for f in ("4", "0.5")
    ]


# --- the docs are reference: no history, and short enough to read -----------------------------

DOCS = sorted((REPO / "docs").glob("*.md"))
MAX_DOC_LINES = 3500
HISTORY = re.compile(
    r"(?<![\w&/#-])#\d+\b"  # an issue or pull-request number: "#54"
    r"|\b[Ii]ssues? #?\d+"  # "issue 57", "issues 12"
    r"|(?<!sha256:)(?<![\w-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"  # a commit hash
)
"""What history looks like on a page: it belongs in CHANGELOG.md and bench/results/, not in docs/."""


def history_problems(pages: list[Path]) -> list[str]:
    """`page:line: 'match'` for each issue number or commit hash outside code blocks and HTML comments."""
    problems = []
    for page in pages:
        fence = False
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if re.match(r"^\s*```", line):
                fence = not fence
                continue
            if fence:
                continue
            text = re.sub(r"<!--.*?-->", "", line)
            problems += [f"{page.name}:{n}: {m.group(0)!r}" for m in HISTORY.finditer(text)]
    return problems


def test_no_doc_page_names_an_issue_number_or_a_commit_hash():
    assert history_problems([*DOCS, REPO / "README.md"]) == []


def test_history_on_a_page_is_named(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "Fixed in #54 and issue 57, at 27a3159; see `9a43c2e1`.\n"
        "Anchors (#configs), ids `q#0`, 1507146 people, a decade, sha256:9d0e5ee410c3 and\n"
        "```\ngit show 2743159  # code is not prose\n```\n",
        encoding="utf-8",
    )
    assert history_problems([page]) == [
        "p.md:1: '#54'",
        "p.md:1: 'issue 57'",
        "p.md:1: '27a3159'",
        "p.md:1: '9a43c2e1'",
    ]


def test_the_docs_stay_within_their_line_budget():
    lines = {page.name: page.read_text(encoding="utf-8").count("\n") for page in DOCS}
    assert sum(lines.values()) <= MAX_DOC_LINES, f"docs/*.md: {sum(lines.values())} lines: {lines}"
