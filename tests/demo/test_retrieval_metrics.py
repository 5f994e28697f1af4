"""nDCG@k and recall@k against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from bench.retrieval_metrics import dcg_at_k, ndcg_at_k, recall_at_k


def test_binary_gold_ndcg_by_hand():
    # DCG = 1/log2(2) + 0 + 1/log2(4) = 1.5; ideal = 1 + 1/log2(3) = 1.63093
    assert dcg_at_k(["a", "x", "b"], ["a", "b"], 3) == pytest.approx(1.5)
    assert ndcg_at_k(["a", "x", "b"], ["a", "b"], 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["a", "x", "b"], ["a", "b"], 3) == pytest.approx(0.919721, abs=1e-6)
    assert ndcg_at_k(["a", "b", "x"], ["a", "b"], 3) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "a"], ["a"], 1) == 0.0
    # one gold passage at rank 2 of 5: 1/log2(3)
    assert ndcg_at_k(["x", "a", "y", "z", "w"], ["a"], 5) == pytest.approx(0.630930, abs=1e-6)


def test_graded_gold_ndcg_by_hand():
    # gains a=2, b=1; ranked [b, a]: DCG = 1 + 2/log2(3) = 2.26186; ideal = 2 + 1/log2(3) = 2.63093
    assert ndcg_at_k(["b", "a"], {"a": 2.0, "b": 1.0}, 2) == pytest.approx(0.859719, abs=1e-6)
    # ideal at k=1 is the best gain alone: 1/2
    assert ndcg_at_k(["b", "a"], {"a": 2.0, "b": 1.0}, 1) == pytest.approx(0.5)


def test_a_repeated_id_gains_once_and_keeps_its_rank():
    # the repeat at rank 2 gains nothing; b at rank 3 gains 1/log2(4) = 0.5
    assert dcg_at_k(["a", "a", "b"], ["a", "b"], 3) == pytest.approx(1.5)


def test_recall_by_hand():
    assert recall_at_k(["a", "x", "b"], ["a", "b"], 2) == 0.5
    assert recall_at_k(["a", "x", "b"], ["a", "b", "c", "d"], 3) == 0.5
    assert recall_at_k([], ["a"], 5) == 0.0


def test_undefined_without_gold_or_with_bad_k():
    with pytest.raises(ValueError, match="gold"):
        ndcg_at_k(["a"], [], 5)
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(["a"], ["a"], 0)
