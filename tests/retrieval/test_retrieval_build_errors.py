"""recipes/build_index.py on bad input: one line, exit 2, inputs untouched, a good re-run works.

Every corpus here is a few rows written to tmp_path; the recipe runs as a subprocess, as a user
would run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_script

from executor_sft.retrieval import Manifest, build_index, load_retriever
from executor_sft.retrieval.bm25 import BM25Retriever
from executor_sft.retrieval.build import staging_dir
from executor_sft.retrieval.corpus import Corpus

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "build_index.py"
GOOD_ROW = b'{"id": "1", "title": "Apples", "text": "Apples grow on trees."}\n'
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def write_corpus(path: Path, n: int, topic: str) -> Path:
    rows = [
        {"id": f"{topic}-{i}", "title": f"{topic} {i}", "text": f"{topic} fact {WORDS[i]}"} for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_recipe(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(RECIPE), *map(str, args)]
    return run_script(cmd, capture_output=True, text=True, env=env, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ")
    for needle in needles:
        assert needle in line
    return line


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("empty.jsonl", b"", "empty.jsonl: holds no passages"),
        ("latin1.jsonl", GOOD_ROW + b'{"id": "2", "text": "caf\xe9"}\n', "latin1.jsonl:2: byte 0xe9"),
        ("broken.jsonl", GOOD_ROW + b'{"id": "2", "text": \n', "broken.jsonl:2: field '<json>'"),
        ("missing.jsonl", None, "missing.jsonl: not found"),
    ],
)
def test_bad_corpus_fails_in_one_line_before_the_encoder_loads(tmp_path, name, content, where):
    corpus = tmp_path / name
    if content is not None:
        corpus.write_bytes(content)
    out = tmp_path / "index"
    # An encoder that does not exist: were it loaded first, this would be a model error.
    proc = run_recipe("--corpus", corpus, "--output", out, "--dense", "no-such/encoder", "--bm25")
    assert_one_line_error(proc, str(corpus), where)
    assert not out.exists() and not staging_dir(out).exists()
    if content is not None:
        assert corpus.read_bytes() == content
    good = write_corpus(tmp_path / "good.jsonl", 5, "apple")
    build_index(good, out, bm25=True)
    (hits,) = load_retriever(out, "bm25", corpus=good).search(["apple fact delta"], 1)
    assert hits[0].doc_id == "apple-3"


@pytest.mark.parametrize(
    ("encoder", "where"),
    [
        ("./no-such-dir", "no such directory"),
        ("a//b", "not a model hub id"),
        ("no-such/encoder", "couldn't find them in the cached files"),  # offline: not cached
    ],
)
def test_an_encoder_that_does_not_exist_fails_in_one_line(tmp_path, encoder, where):
    good = write_corpus(tmp_path / "good.jsonl", 5, "apple")
    before = good.read_bytes()
    out = tmp_path / "index"
    proc = run_recipe("--corpus", good, "--output", out, "--dense", encoder)
    assert_one_line_error(proc, f"--dense encoder {encoder!r}", where, "pass an alias (")
    assert not out.exists() and not staging_dir(out).exists()
    assert good.read_bytes() == before


def test_output_holding_another_corpus_without_manifest_is_refused(tmp_path):
    other = write_corpus(tmp_path / "other.jsonl", 7, "pear")
    out = tmp_path / "index"
    out.mkdir()
    Corpus.from_file(other).save(out / "docs.arrow")
    before = snapshot(out)
    good = write_corpus(tmp_path / "good.jsonl", 5, "apple")
    proc = run_recipe("--corpus", good, "--output", out, "--bm25")
    assert_one_line_error(proc, f"{out}: is not empty", "--overwrite")
    assert snapshot(out) == before and not staging_dir(out).exists()

    proc = run_recipe("--corpus", good, "--output", out, "--bm25", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert Manifest.load(out).corpus.num_docs == 5
    assert len(load_retriever(out, "bm25", corpus=good).corpus) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.jsonl", "index", "other.jsonl"]


def test_index_of_another_corpus_is_kept(tmp_path):
    other = write_corpus(tmp_path / "other.jsonl", 7, "pear")
    out = tmp_path / "index"
    build_index(other, out, bm25=True)
    before = snapshot(out)
    good = write_corpus(tmp_path / "good.jsonl", 5, "apple")
    proc = run_recipe("--corpus", good, "--output", out, "--bm25")
    assert_one_line_error(proc, f"{out}: holds an index of another corpus", str(other))
    assert snapshot(out) == before
    assert load_retriever(out, "bm25", corpus=other)


def test_overwrite_never_deletes_the_corpus_it_reads(tmp_path):
    out = tmp_path / "index"
    out.mkdir()
    corpus = write_corpus(out / "corpus.jsonl", 5, "apple")
    before = corpus.read_bytes()
    proc = run_recipe("--corpus", corpus, "--output", out, "--bm25", "--overwrite")
    assert_one_line_error(proc, "would delete the corpus")
    assert corpus.read_bytes() == before


def test_a_failed_rebuild_leaves_the_index_as_it_was(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c.jsonl", 6, "plum")
    out = tmp_path / "index"
    build_index(corpus, out, bm25=True)
    before = snapshot(out)

    def crash(self, directory):
        (Path(directory) / "half-written").mkdir(parents=True)
        raise RuntimeError("disk full")

    monkeypatch.setattr(BM25Retriever, "save", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        build_index(corpus, out, bm25=True)
    assert snapshot(out) == before
    monkeypatch.undo()
    build_index(corpus, out, bm25=True)  # resumes from the leftover staging directory
    assert not staging_dir(out).exists()
    (hits,) = load_retriever(out, "bm25", corpus=corpus).search(["plum fact charlie"], 1)
    assert hits[0].doc_id == "plum-2"


def test_rebuilding_the_same_corpus_keeps_the_index_id(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 6, "fig")
    out = tmp_path / "index"
    build_index(corpus, out, bm25=True)
    first = Manifest.load(out)
    build_index(corpus, out, bm25=True)
    again = Manifest.load(out)
    assert again.index_id("bm25", ["bm25"]) == first.index_id("bm25", ["bm25"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "index"]


def test_manifest_records_the_versions_that_made_each_part(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 4, "kiwi")
    out = tmp_path / "index"
    build_index(corpus, out, bm25=True)
    m = Manifest.load(out)
    assert {"bm25s", "PyStemmer"} <= set(m.bm25.versions)
    assert m.index_id("bm25", ["bm25"]) == m.model_copy(
        update={"bm25": m.bm25.model_copy(update={"versions": {}})}
    ).index_id("bm25", ["bm25"])


def test_manifest_written_before_part_versions_still_loads(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 4, "lime")
    out = tmp_path / "index"
    build_index(corpus, out, bm25=True)
    raw = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    del raw["bm25"]["versions"]
    (out / "manifest.json").write_text(json.dumps(raw), encoding="utf-8")
    assert Manifest.load(out).bm25.versions == {}
    (hits,) = load_retriever(out, "bm25", corpus=corpus).search(["lime fact bravo"], 1)
    assert hits[0].doc_id == "lime-1"


def test_output_in_missing_folders_is_created_once_the_corpus_is_good(tmp_path):
    """`--output indexes/minibench` on a fresh clone: the parents are made, but not for a bad corpus."""
    out = tmp_path / "indexes" / "nested" / "minibench"
    proc = run_recipe("--corpus", tmp_path / "missing.jsonl", "--output", out, "--bm25")
    assert_one_line_error(proc, "missing.jsonl: not found")
    assert not (tmp_path / "indexes").exists()
    good = write_corpus(tmp_path / "good.jsonl", 5, "apple")
    proc = run_recipe("--corpus", good, "--output", out, "--bm25")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["minibench"]  # no staging left beside it
    (hits,) = load_retriever(out, "bm25", corpus=good).search(["apple fact delta"], 1)
    assert hits[0].doc_id == "apple-3"
