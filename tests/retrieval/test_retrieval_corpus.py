"""Corpus loading: both row shapes, JSONL and parquet, errors that name file, line and field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from executor_sft.retrieval.corpus import Corpus, CorpusFormatError, iter_corpus, load_corpus


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" if not isinstance(r, str) else r + "\n" for r in rows))
    return path


def test_contents_rows_split_title_from_first_line(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl", [{"id": "a", "contents": '"Paris"\nParis is the capital.\nMore.'}]
    )
    (p,) = iter_corpus(path)
    assert (p.id, p.title, p.text) == ("a", "Paris", "Paris is the capital.\nMore.")
    assert p.contents.startswith("Paris\n")


def test_title_text_rows_and_parquet_give_the_same_corpus(tmp_path):
    rows = [{"id": "a", "title": "T1", "text": "x"}, {"id": "b", "title": "T2", "text": "y"}]
    jsonl = write_jsonl(tmp_path / "c.jsonl", rows)
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    a, b = load_corpus(jsonl), load_corpus(parquet)
    assert [a[i] for i in range(2)] == [b[i] for i in range(2)]
    assert a.index_texts() == ["T1\nx", "T2\ny"]


def test_saved_corpus_is_memory_mapped_back_identically(tmp_path):
    corpus = load_corpus(
        write_jsonl(
            tmp_path / "c.jsonl", [{"id": str(i), "title": f"t{i}", "text": "é" * i} for i in range(5)]
        )
    )
    corpus.save(tmp_path / "docs.arrow")
    loaded = Corpus.load(tmp_path / "docs.arrow")
    assert [loaded[i] for i in range(5)] == [corpus[i] for i in range(5)]
    assert loaded.row_of("3") == 3


@pytest.mark.parametrize(
    ("rows", "line", "field"),
    [
        ([{"id": "a", "text": "x"}, {"title": "t", "text": "y"}], 2, "id"),
        ([{"id": "a", "title": "t"}], 1, "text"),
        ([{"id": "a", "text": "x"}, "{not json"], 2, "<json>"),
        ([{"id": "a", "contents": 3}], 1, "contents"),
        ([{"id": "a", "title": 5, "text": "x"}], 1, "title"),
        ([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], 2, "id"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, rows, line, field):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(CorpusFormatError) as e:
        load_corpus(path)
    assert (e.value.line, e.value.field) == (line, field)
    assert str(path) in str(e.value) and f":{line}:" in str(e.value) and field in str(e.value)


def test_minibench_corpus_loads(minibench_corpus_path):
    corpus = load_corpus(minibench_corpus_path)
    assert len(corpus) == sum(1 for _ in minibench_corpus_path.open())
    assert corpus[0].title and corpus[0].text
