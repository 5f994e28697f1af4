"""The cross-encoder rerank stage (a small random cross-encoder built locally) and the retrieval cache."""

from __future__ import annotations

import pytest

from executor_sft.retrieval import (
    BM25Retriever,
    CachedRetriever,
    build_retriever,
    load_retriever,
)
from executor_sft.retrieval.config import RetrieverConfig


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory):
    """A random 2-layer BERT cross-encoder with MiniLM's tokenizer: no hub model exists offline."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from executor_sft.retrieval.encoders import resolve_model

    out = tmp_path_factory.mktemp("cross_encoder")
    tok = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


@pytest.mark.slow
def test_cross_encoder_stage_orders_candidates_by_its_scores(bm25_index, cross_encoder_dir, dev_questions):
    bm25 = load_retriever(bm25_index, "bm25")
    rr = load_retriever(bm25_index, "cross_encoder", rerank={"model": cross_encoder_dir, "top_n": 8})
    q = dev_questions[3]["question"]
    (out,) = rr.search([q], 3)
    (candidates,) = bm25.search([q], 8)
    scores = rr.scorer.model.predict([(q, h.contents) for h in candidates])  # each fits the 512 window
    expected = [candidates[i].doc_id for i in sorted(range(8), key=lambda i: -float(scores[i]))[:3]]
    assert [h.doc_id for h in out] == expected != [h.doc_id for h in candidates[:3]]
    assert [h.score for h in out] == pytest.approx(sorted((float(s) for s in scores), reverse=True)[:3])
    assert rr.index_id.startswith(f"cross_encoder({cross_encoder_dir};n8;w512)/bm25-")


def test_build_retriever_makes_a_rerank_stage_from_config(bm25_index, cross_encoder_dir):
    cfg = {"index": str(bm25_index), "kind": "cross_encoder", "cache": {"enabled": False},
           "options": {"over": "bm25", "rerank": {"model": cross_encoder_dir, "top_n": 5, "batch_size": 2}}}  # fmt: skip
    r = build_retriever(cfg)
    assert r.top_n == 5 and r.scorer.batch_size == 2 and len(r.search(["rock band drummer"], 3)[0]) == 3


class Counting(BM25Retriever):
    """A real BM25 retriever that counts the queries it actually runs."""

    def __init__(self, inner):
        super().__init__(inner.model, inner.corpus, inner.info, inner.index_id)
        self.seen: list[str] = []

    def search(self, queries, k):
        self.seen.extend(queries)
        return super().search(queries, k)


def test_cache_hits_skip_the_retriever_and_persist(bm25_index, tmp_path, dev_questions):
    inner = Counting(load_retriever(bm25_index, "bm25"))
    qs = [q["question"] for q in dev_questions[:4]]
    db = tmp_path / "cache.sqlite"
    cached = CachedRetriever(inner, maxsize=3, path=db)
    first = cached.search(qs + qs[:1], 3)
    assert inner.seen == sorted(set(qs))  # the duplicate query ran once
    assert cached.search(qs, 3) == first[:4] and len(inner.seen) == 4
    cached.search(qs[:1], 5)  # k is part of the key
    assert len(inner.seen) == 5
    assert len(cached._lru) == 3  # LRU bound
    cached.close()
    again = CachedRetriever(inner, path=db)  # a new process would see the same file
    assert again.search(qs, 3) == first[:4] and len(inner.seen) == 5
    assert first[0][0].title and first[0][0].score > 0


async def test_cache_async_path(bm25_index, dev_questions):
    inner = Counting(load_retriever(bm25_index, "bm25"))
    cached = CachedRetriever(inner)
    q = [dev_questions[0]["question"]]
    a = await cached.asearch(q, 3)
    b = await cached.asearch(q, 3)
    assert a == b and inner.seen == q and cached.hits == 1 and cached.misses == 1


def test_build_retriever_from_config(bm25_index, minibench_corpus_path, tmp_path):
    r = build_retriever(
        {
            "index": str(bm25_index),
            "kind": "bm25",
            "corpus": str(minibench_corpus_path),
            "cache": {"path": str(tmp_path / "c.sqlite")},
        }
    )
    assert isinstance(r, CachedRetriever) and r.index_id.startswith("bm25-")
    assert len(r.search(["rock band drummer"], 4)[0]) == 4
    with pytest.raises(ValueError, match="exactly one"):
        RetrieverConfig(index=str(bm25_index), url="http://127.0.0.1:1")
    with pytest.raises(ValueError):
        RetrieverConfig(kind="bm26", index=str(bm25_index))
