"""Index directories: build/save/load round trip, manifest contents, mismatch errors, resume."""

from __future__ import annotations

import json

import pytest

from executor_sft.errors import ConfigError
from executor_sft.retrieval import BM25Retriever, IndexMismatchError, Manifest, build_index, load_retriever
from executor_sft.retrieval.build import shard_path
from executor_sft.retrieval.corpus import load_corpus


@pytest.mark.slow
def test_bm25_round_trip_gives_the_same_results(bm25_index, minibench_corpus_path, dev_questions):
    in_memory = BM25Retriever.build(load_corpus(minibench_corpus_path))
    qs = [q["question"] for q in dev_questions[:30]]
    for mmap in (True, False):
        loaded = load_retriever(bm25_index, "bm25", mmap=mmap)
        assert loaded.search(qs, 5) == in_memory.search(qs, 5)


def test_manifest_records_what_built_the_index(bm25_index, minibench_corpus_path):
    m = Manifest.load(bm25_index)
    assert m.kinds == ["bm25"] and m.dense is None
    assert m.corpus.num_docs == sum(1 for _ in minibench_corpus_path.open())
    assert m.corpus.size_bytes == minibench_corpus_path.stat().st_size
    assert m.bm25.stemmer == "english" and "bm25s" in m.versions
    raw = json.loads((bm25_index / "manifest.json").read_text())
    assert raw["schema"] == "executor_sft.index/v1"


def test_loading_with_another_corpus_fails_clearly(bm25_index, minibench_corpus_path, tmp_path):
    assert load_retriever(bm25_index, "bm25", corpus=minibench_corpus_path)  # the right corpus passes
    other = tmp_path / "other.jsonl"
    other.write_text(
        minibench_corpus_path.read_text(encoding="utf-8").replace("Porcaro", "Porcara", 1), encoding="utf-8"
    )
    with pytest.raises(IndexMismatchError, match="was built from"):
        load_retriever(bm25_index, "bm25", corpus=other)


def test_missing_kind_and_unknown_options_fail_clearly(bm25_index):
    with pytest.raises(IndexMismatchError, match="no dense index"):
        load_retriever(bm25_index, "dense")
    with pytest.raises(ConfigError, match="unknown options"):
        load_retriever(bm25_index, "bm25", nprobe=3)


@pytest.mark.slow
def test_dense_index_mismatch_and_resume(subset_index, subset_corpus):
    m = Manifest.load(subset_index)
    assert m.kinds == ["bm25", "dense"]
    assert m.dense.dim == 384 and m.dense.model == "minilm" and m.dense.index_type == "flat"
    with pytest.raises(IndexMismatchError, match="encoder"):
        load_retriever(subset_index, "dense", model="some-other/encoder")
    with pytest.raises(IndexMismatchError, match="dim"):
        load_retriever(subset_index, "dense", dim=128)
    # Resume: every shard is already there, so nothing is embedded again.
    shards = sorted((subset_index / "dense" / "shards").glob("emb_*.npy"))
    assert shards and shard_path(subset_index / "dense" / "shards", 0) == shards[0]
    mtimes = [s.stat().st_mtime_ns for s in shards]
    from executor_sft.retrieval.encoders import EncoderConfig

    res = build_index(
        subset_corpus,
        subset_index,
        bm25=False,
        dense="minilm",
        encoder=EncoderConfig(max_length=128),
        shard_size=64,
    )
    assert res.embedded_shards == 0 and res.skipped_shards == len(shards) and res.complete
    assert [s.stat().st_mtime_ns for s in shards] == mtimes
    # A different encoder setting must not be mixed into existing shards.
    with pytest.raises(IndexMismatchError, match="max_length"):
        build_index(
            subset_corpus,
            subset_index,
            bm25=False,
            dense="minilm",
            encoder=EncoderConfig(max_length=64),
            shard_size=64,
        )


@pytest.mark.slow
def test_split_work_then_merge(subset_corpus, tmp_path):
    """Two 'machines' embed their shards; a final run merges without re-embedding."""
    from executor_sft.retrieval.encoders import EncoderConfig

    out = tmp_path / "idx"
    kw = dict(bm25=False, dense="minilm", encoder=EncoderConfig(max_length=32), shard_size=50)
    r1 = build_index(subset_corpus, out, num_shards=2, shard_index=1, **kw)
    assert not r1.complete and r1.embedded_shards >= 1
    r0 = build_index(subset_corpus, out, num_shards=2, shard_index=0, **kw)
    assert not r0.complete
    assert not (out / "dense" / "index.faiss").exists()
    final = build_index(subset_corpus, out, **kw)
    assert final.complete and final.embedded_shards == 0
    assert final.skipped_shards == r0.embedded_shards + r1.embedded_shards
    r = load_retriever(out, "dense")
    corpus = load_corpus(subset_corpus)
    (hits,) = r.search([corpus[7].text[:200]], 3)
    assert hits[0].doc_id == corpus[7].id
