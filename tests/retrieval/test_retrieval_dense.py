"""Dense retrieval with the offline MiniLM over a subset of minibench (gold + distractors)."""

from __future__ import annotations

import numpy as np
import pytest

from executor_sft.retrieval import DenseRetriever, Encoder, EncoderConfig, load_retriever
from executor_sft.retrieval.build import load_shards
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.encoders import PREFIX_PRESETS, default_preset, resolve_model

pytestmark = pytest.mark.slow


def recall(retriever, questions, k):
    res = retriever.search([q["question"] for q in questions], k)
    return np.mean(
        [
            len({h.doc_id for h in hits} & set(q["positive_doc_ids"])) / len(q["positive_doc_ids"])
            for q, hits in zip(questions, res, strict=True)
        ]
    )


@pytest.fixture(scope="module")
def dense(subset_index):
    return load_retriever(subset_index, "dense")


@pytest.fixture(scope="module")
def embeddings(subset_index):
    docs = Corpus.load(subset_index / "docs.arrow")
    return docs, load_shards(subset_index / "dense" / "shards", len(docs), 64)


def test_dense_finds_gold_passages(dense, subset_questions):
    # ~160 passages, 12 questions: MiniLM puts most gold passages in the top 5; random vectors would not.
    assert recall(dense, subset_questions, 5) > 0.5
    (hits,) = dense.search([subset_questions[0]["question"]], 5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(-1.001 <= h.score <= 1.001 for h in hits)


def test_index_types_agree_with_exact_search(dense, embeddings, subset_questions):
    docs, emb = embeddings
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-3)
    qs = [q["question"] for q in subset_questions]
    exact = [[h.doc_id for h in hits] for hits in dense.search(qs, 5)]
    hnsw = DenseRetriever.from_embeddings(dense.encoder, emb, docs, "hnsw")
    assert [[h.doc_id for h in hits] for hits in hnsw.search(qs, 5)] == exact
    ivfpq = DenseRetriever.from_embeddings(dense.encoder, emb, docs, "ivfpq")
    approx = [[h.doc_id for h in hits] for hits in ivfpq.search(qs, 5)]
    top1 = np.mean([a[0] in e[:3] for a, e in zip(approx, exact, strict=True)])
    # 149 vectors allow only 1-bit PQ codes (measured 0.67 here); a random index would score ~3/149.
    assert top1 >= 0.4


def test_transformers_mean_pooling_matches_sentence_transformers():
    texts = ["Paris is the capital of France.", "The Eiffel Tower was completed in 1889."]
    st = Encoder(EncoderConfig(model="minilm", backend="sentence-transformers", max_length=64))
    hf = Encoder(EncoderConfig(model="minilm", backend="transformers", pooling="mean", max_length=64))
    assert np.allclose(st.encode_passages(texts), hf.encode_passages(texts), atol=1e-4)


def test_matryoshka_truncation_renormalises():
    full = Encoder(EncoderConfig(model="minilm", max_length=64))
    small = Encoder(EncoderConfig(model="minilm", dim=64, max_length=64))
    a, b = full.encode_queries(["who wrote hamlet"]), small.encode_queries(["who wrote hamlet"])
    assert b.shape == (1, 64) and np.isclose(np.linalg.norm(b), 1, atol=1e-5)
    assert np.allclose(b, a[:, :64] / np.linalg.norm(a[:, :64]), atol=1e-5)


def test_prefix_presets_and_aliases():
    assert resolve_model("minilm").endswith("model")
    assert default_preset("intfloat/e5-base-v2") == "e5" and PREFIX_PRESETS["e5"] == ("query: ", "passage: ")
    q, p = EncoderConfig(model="Qwen/Qwen3-Embedding-0.6B").prefixes()
    assert q.startswith("Instruct: ") and q.endswith("Query:") and p == ""
    assert EncoderConfig(model="minilm").prefixes() == ("", "")
    assert EncoderConfig(model="x", preset="e5", query_prefix="Q: ").prefixes() == ("Q: ", "passage: ")


def test_query_prefix_changes_query_vectors_only():
    enc = Encoder(EncoderConfig(model="minilm", preset="e5", max_length=64))
    plain = Encoder(EncoderConfig(model="minilm", max_length=64))
    assert not np.allclose(enc.encode_queries(["hamlet"]), plain.encode_queries(["hamlet"]))
    assert np.allclose(enc.encode_queries(["hamlet"]), plain.encode_passages(["query: hamlet"]), atol=1e-5)
