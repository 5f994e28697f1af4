"""Hybrid fusion: weighted min-max fusion and RRF, unit level and over real retrievers."""

from __future__ import annotations

import pytest

from executor_sft.retrieval import Hit, HybridRetriever, fuse, load_retriever


def hits(*pairs):
    return [Hit(d, d.upper(), f"text {d}", s) for d, s in pairs]


def test_weighted_fusion_normalises_over_the_union():
    dense = hits(("a", 0.9), ("b", 0.5), ("c", 0.1))
    bm25 = hits(("c", 30.0), ("d", 10.0))
    out = fuse([dense, bm25], [0.6, 0.4], k=4)
    got = {h.doc_id: round(h.score, 6) for h in out}
    # a: 0.6*1; b: 0.6*0.5; c: 0.6*0 + 0.4*1; d: 0.4*0
    assert got == {"a": 0.6, "c": 0.4, "b": 0.3, "d": 0.0}
    assert [h.doc_id for h in out] == ["a", "c", "b", "d"]
    assert out[0].title == "A"


def test_rrf_rewards_agreement():
    one = hits(("a", 5), ("b", 4), ("c", 3))
    two = hits(("b", 9), ("c", 8), ("a", 1))
    out = fuse([one, two], [1.0, 1.0], k=3, method="rrf", rrf_k=60)
    assert [h.doc_id for h in out] == ["b", "a", "c"]
    assert out[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_bad_fusion_arguments():
    with pytest.raises(ValueError):
        fuse([hits(("a", 1))], [1.0], 1, method="max")


@pytest.mark.slow
def test_hybrid_over_real_retrievers(subset_index, subset_questions):
    dense = load_retriever(subset_index, "dense")
    bm25 = load_retriever(subset_index, "bm25")
    qs = [q["question"] for q in subset_questions]
    for kind in ("hybrid", "rrf"):
        hy = load_retriever(subset_index, kind)
        assert isinstance(hy, HybridRetriever) and hy.method == ("weighted" if kind == "hybrid" else "rrf")
        results = hy.search(qs, 5)
        d, b = dense.search(qs, 20), bm25.search(qs, 20)
        for res, dh, bh in zip(results, d, b, strict=True):
            assert len(res) == 5
            assert [h.doc_id for h in res] == [h.doc_id for h in fuse([dh, bh], hy.weights, 5, hy.method)]
    custom = load_retriever(subset_index, "hybrid", weights=[1.0, 0.0], depth=5)
    # All weight on dense: the ranking is the dense ranking.
    assert [[h.doc_id for h in x] for x in custom.search(qs, 5)] == [
        [h.doc_id for h in x] for x in dense.search(qs, 5)
    ]
