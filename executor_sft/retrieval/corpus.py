"""Passage corpora: read JSONL/parquet rows into one columnar, memory-mappable store.

Accepted rows: `{"id", "contents"}` (title = first line of contents, surrounding quotes
stripped as in the FlashRAG/Search-R1 wiki dumps) or `{"id", "title", "text"}`.
An index directory keeps its own copy as an Arrow IPC file (`docs.arrow`) so loading an
index memory-maps the passages instead of re-parsing the corpus.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])


class CorpusFormatError(ValueError):
    """A corpus row that cannot be read; the message names the file, the line and the field."""

    def __init__(self, source: str | Path, line: int, field: str, problem: str):
        self.source, self.line, self.field = str(source), line, field
        super().__init__(f"{source}:{line}: field '{field}': {problem}")


@dataclass(frozen=True, slots=True)
class Passage:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text

    @property
    def index_text(self) -> str:
        """What gets indexed: the title together with the text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1 `contents`: the first line is the title (often quoted), the rest the text."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


def passage_from_row(row: dict[str, Any], source: str | Path, line: int) -> Passage:
    if not isinstance(row, dict):
        raise CorpusFormatError(source, line, "<row>", f"expected a JSON object, got {type(row).__name__}")
    doc_id = row.get("id", row.get("_id"))
    if doc_id is None or doc_id == "":
        raise CorpusFormatError(source, line, "id", "missing or empty")
    if row.get("contents") is not None:
        if not isinstance(row["contents"], str):
            raise CorpusFormatError(source, line, "contents", "must be a string")
        title, text = split_contents(row["contents"])
    else:
        if row.get("text") is None:
            raise CorpusFormatError(source, line, "text", "missing (need 'contents' or 'title'+'text')")
        title, text = row.get("title") or "", row["text"]
        for name, value in (("title", title), ("text", text)):
            if not isinstance(value, str):
                raise CorpusFormatError(source, line, name, f"must be a string, got {type(value).__name__}")
    return Passage(str(doc_id), title, text)


def iter_corpus(path: str | Path) -> Iterator[Passage]:
    """Stream passages from a JSONL (`.jsonl`, `.json` lines) or parquet file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"corpus not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        line = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            for row in batch.to_pylist():
                line += 1
                yield passage_from_row(row, path, line)
        return
    with path.open("r", encoding="utf-8") as f:
        for line, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as e:
                raise CorpusFormatError(path, line, "<json>", f"invalid JSON: {e.msg}") from e
            yield passage_from_row(row, path, line)


def file_fingerprint(path: str | Path, chunk: int = 1 << 20) -> str:
    """BLAKE2b of the file bytes: names the corpus an index was built from."""
    h = hashlib.blake2b(digest_size=16)
    with Path(path).open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class Corpus:
    """Passages in an Arrow table (memory-mapped when read from an index directory)."""

    def __init__(self, table: pa.Table):
        self.table = table
        self._ids = table.column("id")
        self._titles = table.column("title")
        self._texts = table.column("text")
        self._row_of: dict[str, int] | None = None

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, i: int) -> Passage:
        return Passage(self._ids[i].as_py(), self._titles[i].as_py(), self._texts[i].as_py())

    def ids(self) -> list[str]:
        return self._ids.to_pylist()

    def index_texts(self) -> list[str]:
        return [
            f"{t}\n{x}" if t else x
            for t, x in zip(self._titles.to_pylist(), self._texts.to_pylist(), strict=True)
        ]

    def row_of(self, doc_id: str) -> int:
        if self._row_of is None:
            self._row_of = {d: i for i, d in enumerate(self.ids())}
        return self._row_of[doc_id]

    @classmethod
    def from_passages(cls, passages: list[Passage]) -> Corpus:
        return cls(
            pa.table(
                {
                    "id": [p.id for p in passages],
                    "title": [p.title for p in passages],
                    "text": [p.text for p in passages],
                },
                schema=SCHEMA,
            )
        )

    @classmethod
    def from_file(cls, path: str | Path) -> Corpus:
        """Read a corpus file; duplicate ids are an error (they would make hits ambiguous)."""
        passages = list(iter_corpus(path))
        seen: dict[str, int] = {}
        for i, p in enumerate(passages, start=1):
            if p.id in seen:
                raise CorpusFormatError(path, i, "id", f"duplicate id {p.id!r} (first at row {seen[p.id]})")
            seen[p.id] = i
        return cls.from_passages(passages)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
            writer.write_table(self.table, max_chunksize=65_536)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> Corpus:
        """Memory-map an Arrow file written by `save` (no copy into RAM)."""
        source = pa.memory_map(str(path), "r")
        return cls(pa.ipc.open_file(source).read_all())


def load_corpus(path: str | Path) -> Corpus:
    """A corpus file (JSONL/parquet) or a saved `docs.arrow`."""
    path = Path(path)
    return Corpus.load(path) if path.suffix == ".arrow" else Corpus.from_file(path)
