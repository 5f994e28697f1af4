"""Hybrid fusion: normalisations and RRF on hand-made hit lists, and over real retrievers."""

from __future__ import annotations

import pytest

from executor_sft.retrieval import Hit, HybridRetriever, fuse, load_retriever
from executor_sft.retrieval.fusion import normalise, score_floor


def hits(*pairs):
    return [Hit(d, d.upper(), f"text {d}", s) for d, s in pairs]


# Dense (cosine) barely separates its candidates; BM25 has a clear winner, c.
FLAT_DENSE = hits(("a", 0.62), ("b", 0.60), ("c", 0.58))
PEAKED_BM25 = hits(("c", 30.0), ("d", 10.0), ("e", 3.0))


def test_theoretical_normalisation_keeps_a_flat_list_flat():
    out = fuse([FLAT_DENSE, PEAKED_BM25], [0.6, 0.4], k=5, floors=[-1.0, 0.0], depth=3)
    dense = {"a": 1.62 / 1.62, "b": 1.60 / 1.62, "c": 1.58 / 1.62}
    bm25 = {"c": 1.0, "d": 10 / 30, "e": 3 / 30}
    # Both lists are full (depth 3): a candidate one retriever missed gets that list's lowest value.
    expected = {d: 0.6 * dense.get(d, dense["c"]) + 0.4 * bm25.get(d, bm25["e"]) for d in "abcde"}
    assert {h.doc_id: h.score for h in out} == pytest.approx(expected)
    assert [h.doc_id for h in out] == sorted(expected, key=lambda d: -expected[d])
    assert out[0].doc_id == "c" and out[0].title == "C"


def test_minmax_stretches_a_flat_list_to_the_full_range():
    out = fuse([FLAT_DENSE, PEAKED_BM25], [0.6, 0.4], k=5, normalization="minmax", depth=3)
    # a: 0.6*1; b: 0.6*0.5; c: 0.6*0 + 0.4*1; d: 0.4*7/27; e: 0 -- dense's 0.04 lead decides the top.
    expected = {"a": 0.6, "b": 0.3, "c": 0.4, "d": 0.4 * 7 / 27, "e": 0.0}
    assert {h.doc_id: h.score for h in out} == pytest.approx(expected)
    assert [h.doc_id for h in out] == ["a", "c", "b", "d", "e"]


def test_a_short_list_is_complete_so_a_missing_candidate_gets_the_floor():
    bm25 = hits(("c", 30.0), ("d", 10.0))  # asked for 3, returned 2: nothing else matched a term
    full, missing_full = normalise(bm25, "theoretical", floor=0.0, depth=2)
    short, missing_short = normalise(bm25, "theoretical", floor=0.0, depth=3)
    assert full == short == pytest.approx({"c": 1.0, "d": 1 / 3})
    assert missing_full == pytest.approx(1 / 3) and missing_short == 0.0
    out = fuse([FLAT_DENSE, bm25], [0.6, 0.4], k=3, floors=[-1.0, 0.0], depth=3)
    assert {h.doc_id: h.score for h in out}["a"] == pytest.approx(0.6 * 1.0 + 0.4 * 0.0)


def test_unknown_floor_falls_back_to_the_list_minimum():
    unknown = fuse([FLAT_DENSE, PEAKED_BM25], [0.6, 0.4], k=5, floors=[None, None], depth=3)
    minmax = fuse([FLAT_DENSE, PEAKED_BM25], [0.6, 0.4], k=5, normalization="minmax", depth=3)
    assert [(h.doc_id, h.score) for h in unknown] == [(h.doc_id, h.score) for h in minmax]


def test_zscore_normalisation():
    norm, missing = normalise(hits(("a", 3.0), ("b", 1.0)), "zscore")
    assert norm == pytest.approx({"a": 1.0, "b": -1.0}) and missing == pytest.approx(-1.0)
    _, missing_short = normalise(hits(("a", 3.0), ("b", 1.0)), "zscore", floor=0.0, depth=5)
    assert missing_short == pytest.approx(-2.0)  # the floor, 0, is two deviations below the mean


def test_rrf_rewards_agreement():
    one = hits(("a", 5), ("b", 4), ("c", 3))
    two = hits(("b", 9), ("c", 8), ("a", 1))
    out = fuse([one, two], [1.0, 1.0], k=3, method="rrf", rrf_k=60)
    assert [h.doc_id for h in out] == ["b", "a", "c"]
    assert out[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_bad_fusion_arguments():
    with pytest.raises(ValueError, match="fusion method"):
        fuse([hits(("a", 1))], [1.0], 1, method="max")
    with pytest.raises(ValueError, match="normalization"):
        fuse([hits(("a", 1))], [1.0], 1, normalization="softmax")


def test_score_floors_of_real_retrievers(bm25_index):
    bm25 = load_retriever(bm25_index, "bm25")
    assert score_floor(bm25) == 0.0
    with pytest.raises(ValueError, match="normalization"):
        HybridRetriever([bm25, bm25], normalization="l2")


@pytest.mark.slow
def test_hybrid_over_real_retrievers(subset_index, subset_questions):
    dense = load_retriever(subset_index, "dense")
    bm25 = load_retriever(subset_index, "bm25")
    assert score_floor(dense) == -1.0
    qs = [q["question"] for q in subset_questions]
    d, b = dense.search(qs, 20), bm25.search(qs, 20)
    assert all(-1.0 <= h.score <= 1.0 for x in d for h in x)  # cosine
    assert all(h.score > 0.0 for x in b for h in x)
    for kind, opts in (("hybrid", {}), ("rrf", {}), ("hybrid", {"normalization": "minmax"})):
        hy = load_retriever(subset_index, kind, **opts)
        assert isinstance(hy, HybridRetriever) and hy.method == ("weighted" if kind == "hybrid" else "rrf")
        assert hy.floors == [-1.0, 0.0]
        results = hy.search(qs, 5)
        for res, dh, bh in zip(results, d, b, strict=True):
            assert len(res) == 5
            expected = fuse([dh, bh], hy.weights, 5, hy.method, normalization=hy.normalization,
                            floors=[-1.0, 0.0], depth=20)  # fmt: skip
            assert [h.doc_id for h in res] == [h.doc_id for h in expected]
    assert load_retriever(subset_index, "hybrid").index_id != hy.index_id  # normalisation in the key
    custom = load_retriever(subset_index, "hybrid", weights=[1.0, 0.0], depth=5)
    # All weight on dense: the ranking is the dense ranking.
    assert [[h.doc_id for h in x] for x in custom.search(qs, 5)] == [
        [h.doc_id for h in x] for x in dense.search(qs, 5)
    ]
