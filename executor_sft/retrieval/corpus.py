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

from executor_sft.errors import UserError

SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])


class CorpusFormatError(UserError, ValueError):
    """A corpus that cannot be read; the message names the file and, for one bad row, its line and field."""

    def __init__(self, source: str | Path, line: int | None, field: str | None, problem: str):
        self.source, self.line, self.field = str(source), line, field
        where = str(source) + (f":{line}" if line is not None else "")
        what = f"field '{field}': {problem}" if field is not None else problem
        super().__init__(f"{where}: {what}")


class TitledText:
    """The one `contents` formula of a titled text, shared by a corpus `Passage` and a search `Hit`."""

    __slots__ = ()  # so a slotted subclass keeps no instance __dict__

    @property
    def contents(self) -> str:
        """Search-R1 wire format: title on the first line, then the text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Passage(TitledText):
    id: str
    title: str
    text: str


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
    return (passage for _, passage in iter_numbered(path))


def iter_numbered(path: str | Path) -> Iterator[tuple[int, Passage]]:
    """(line or row number, passage) pairs, so later checks can point at the offending line."""
    path = Path(path)
    if not path.is_file():
        problem = "is a directory" if path.is_dir() else "not found"
        raise CorpusFormatError(path, None, None, f"{problem}: pass a JSONL or parquet corpus file")
    if path.suffix == ".parquet":
        yield from _parquet_rows(path)
    else:
        yield from _jsonl_rows(path)


def _parquet_rows(path: Path) -> Iterator[tuple[int, Passage]]:
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=10_000)
    except pa.ArrowException as e:
        raise CorpusFormatError(path, None, None, f"not a readable parquet file ({e})") from e
    line = 0
    for batch in batches:
        for row in batch.to_pylist():
            line += 1
            yield line, passage_from_row(row, path, line)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Passage]]:
    """Lines are decoded one by one so a bad byte is reported with its line, not as a bare codec error."""
    with path.open("rb") as f:
        for line, raw in enumerate(f, start=1):
            text = _decode_line(raw, path, line)
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise CorpusFormatError(path, line, "<json>", f"invalid JSON: {e.msg}") from e
            yield line, passage_from_row(row, path, line)


def _decode_line(raw: bytes, path: Path, line: int) -> str:
    try:
        return raw.decode("utf-8-sig" if line == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise CorpusFormatError(
            path,
            line,
            None,
            f"byte 0x{raw[e.start]:02x} at column {e.start + 1} is not UTF-8: re-encode the file as UTF-8",
        ) from e


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
        self._rows_of_title: dict[str, list[int]] | None = None

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

    def contents_of(self, doc_id: str) -> str | None:
        """A passage's title and text (as `Passage.contents`), or None for an id not in the corpus."""
        try:
            return self[self.row_of(doc_id)].contents
        except KeyError:
            return None

    def document(self, doc_id: str) -> Passage | None:
        """The whole document passage `doc_id` is a chunk of: every passage with its title, in
        corpus order, joined by blank lines (an untitled passage is its own document); None for
        an unknown id. What the access tool returns where search shows a snippet."""
        try:
            row = self.row_of(doc_id)
        except KeyError:
            return None
        title = self._titles[row].as_py()
        if not title:
            return self[row]
        if self._rows_of_title is None:
            rows: dict[str, list[int]] = {}
            for i, t in enumerate(self._titles.to_pylist()):
                rows.setdefault(t, []).append(i)
            self._rows_of_title = rows
        text = "\n\n".join(self._texts[i].as_py() for i in self._rows_of_title[title])
        return Passage(doc_id, title, text)

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
        passages = []
        seen: dict[str, int] = {}
        for line, p in iter_numbered(path):
            if p.id in seen:
                raise CorpusFormatError(
                    path, line, "id", f"duplicate id {p.id!r} (first at line {seen[p.id]})"
                )
            seen[p.id] = line
            passages.append(p)
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
