"""Every relative link of README.md and docs/*.md names a file that exists, and a heading or
`<a id>` of it where the link has an `#anchor`, so a page cut or renamed cannot strand a link."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```[\w-]*\s*$")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    lines, fence = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fence = not fence
        elif not fence:
            lines.append((n, line))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of `page`: its headings' slugs (a repeated one gets `-1`, `-2`, ...) and `<a id>`s."""
    text = page.read_text(encoding="utf-8")
    found, seen = set(re.findall(r'<a id="([^"]+)"', text)), {}
    for _, line in _prose(text):
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(m[1])
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


def link_problems(pages: list[Path], root: Path = REPO) -> list[str]:
    """`page:line: target: what is wrong` for each relative link that names no file or no anchor."""
    problems = []
    for page in pages:
        for n, line in _prose(page.read_text(encoding="utf-8")):
            for target in LINK.findall(re.sub(r"`+[^`]*`+", "", line)):  # not in inline code
                if re.match(r"^[a-z][\w+.-]*:", target):  # http:, mailto:, ...
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(root)}:{n}: {target}"
                if not dest.exists():
                    problems.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: no such heading")
    return problems


def test_every_relative_link_of_the_docs_resolves():
    assert link_problems(PAGES) == []


def test_a_broken_link_is_named(tmp_path):
    (tmp_path / "b.md").write_text("# B page\n\n## Run it\n\n## Run it\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "# A `code` title\n\n[ok](b.md#run-it-1), [self](#a-code-title), [web](https://x.org/y.md)\n"
        "```\n[in code](gone.md)\n```\n[gone](gone.md) and [no heading](b.md#walk-it), `[code](x.md)`\n",
        encoding="utf-8",
    )
    assert link_problems([page], tmp_path) == [
        "a.md:7: gone.md: no such file",
        "a.md:7: b.md#walk-it: no such heading",
    ]
