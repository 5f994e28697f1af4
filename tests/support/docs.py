"""Code blocks of the docs, for tests that run the docs' examples as a user's own files."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def doc_block(page: str, heading: str, lang: str = "python", index: int = 0) -> str:
    """The `index`-th ```lang block under `heading` (up to the next heading of its level or above)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    m = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    if m is None:
        raise LookupError(f"docs/{page}: no heading {heading!r}")
    level = len(m.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[m.end() :], re.M)
    section = text[m.end() : m.end() + end.start()] if end else text[m.end() :]
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", section, re.M | re.S)
    if len(blocks) <= index:
        raise LookupError(f"docs/{page}, {heading!r}: no ```{lang} block #{index}")
    return blocks[index]


def write_doc_module(page: str, heading: str, directory: Path, module: str, index: int = 0) -> Path:
    """Write a docs example to `directory/<module>.py`, as a user would save it in their project."""
    path = Path(directory) / f"{module}.py"
    path.write_text(doc_block(page, heading, index=index), encoding="utf-8")
    return path
