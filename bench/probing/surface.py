"""Does a world's surface give "a second search is needed" away? Two bag-of-words probes.

A sub-query needs a second search when the scripted teacher's first search (its first planned
query, top k) misses the sub-query's gold passage. If a bag-of-words classifier predicts that
from the sub-query alone, or from the first results' Doc 1 alone, a student can learn when to
search again without reading the passages against the sub-query. The decoupled world
(`WorldConfig.decoupled`) is meant to leave both near chance; `shortcut_accuracy` measures it.

One cue is structural: a person sub-query that names no descriptor never needs a second search
(without one, no passage could tell the meant namesake from another, so the world gives such
sub-queries no miss). `shortcut_accuracy` scores the one-feature rule "search again iff a
descriptor is named" beside the probes, and the probes again on the sub-queries that name one.

The classifier is an L2-regularised logistic regression over binary word features with class-
balanced weights, fitted by gradient descent in numpy (no extra dependency); the score is
balanced accuracy on held-out sub-queries (0.5 is chance whatever the label shares).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from executor_sft.synthetic.scripted_executor import ScriptedTeacherExecutor
from executor_sft.synthetic.world import World

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class FirstSearch:
    """One sub-query, its first search's Doc 1, whether the search missed the gold passage, and
    whether the sub-query names a descriptor ("(novelist)")."""

    sub_query: str
    doc1: str
    needed: bool
    named: bool = True


def first_searches(world: World, retriever: Any, rows: Iterable[dict], k: int) -> list[FirstSearch]:
    """The teacher's first search for each sub-query row (`question`, `positive_doc_ids`)."""
    rows = list(rows)
    teacher = ScriptedTeacherExecutor(world)
    queries = [teacher.queries(r["question"])[0] for r in rows]
    hits = retriever.search(queries, k) if queries else []
    return [
        FirstSearch(
            r["question"],
            f"{h[0].title} {h[0].text}" if h else "",
            not set(r["positive_doc_ids"]) & {x.doc_id for x in h},
            bool(r.get("descriptor")),
        )
        for r, h in zip(rows, hits, strict=True)
    ]


def _features(texts: list[str], vocab: dict[str, int]) -> np.ndarray:
    x = np.zeros((len(texts), len(vocab) + 1))
    x[:, -1] = 1.0  # intercept
    for i, text in enumerate(texts):
        for w in set(_WORD.findall(text.lower())):
            if w in vocab:
                x[i, vocab[w]] = 1.0
    return x


def bow_balanced_accuracy(
    train: list[str],
    y_train: list[bool],
    test: list[str],
    y_test: list[bool],
    l2: float = 1.0,
    steps: int = 500,
) -> float:
    """Balanced accuracy on `test` of a bag-of-words logistic regression fitted on `train`."""
    vocab = {w: i for i, w in enumerate(sorted({w for t in train for w in _WORD.findall(t.lower())}))}
    x, y = _features(train, vocab), np.asarray(y_train, dtype=float)
    pos = max(1.0, y.sum())
    neg = max(1.0, len(y) - y.sum())
    weight = np.where(y == 1, len(y) / (2 * pos), len(y) / (2 * neg))
    w = np.zeros(x.shape[1])
    lr = 0.5
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (weight * (p - y)) / len(y) + l2 * np.r_[w[:-1], 0.0] / len(y)
        w -= lr * grad
    return balanced_accuracy(list((_features(test, vocab) @ w) > 0), y_test)


def balanced_accuracy(pred: list[bool], truth: list[bool]) -> float:
    """The mean of the recalls of the two classes present in `truth` (0.5 is chance)."""
    p, t = np.asarray(pred, dtype=bool), np.asarray(truth, dtype=bool)
    recalls = [float((p[t == c] == c).mean()) for c in (True, False) if (t == c).any()]
    return float(np.mean(recalls)) if recalls else float("nan")


def _probes(train: list[FirstSearch], test: list[FirstSearch]) -> tuple[float, float]:
    y_train, y_test = [s.needed for s in train], [s.needed for s in test]
    return (
        bow_balanced_accuracy([s.sub_query for s in train], y_train, [s.sub_query for s in test], y_test),
        bow_balanced_accuracy([s.doc1 for s in train], y_train, [s.doc1 for s in test], y_test),
    )


def shortcut_accuracy(train: list[FirstSearch], test: list[FirstSearch]) -> dict[str, Any]:
    """Balanced accuracy of the sub-query probe and the Doc 1 probe, of the descriptor rule, and of
    both probes on the sub-queries that name a descriptor, with the label shares."""
    y_train, y_test = [s.needed for s in train], [s.needed for s in test]
    sub_query, doc1 = _probes(train, test)
    named_sub_query, named_doc1 = _probes([s for s in train if s.named], [s for s in test if s.named])
    return {
        "sub_query": sub_query,
        "doc1": doc1,
        "descriptor_rule": balanced_accuracy([s.named for s in test], y_test),
        "named_sub_query": named_sub_query,
        "named_doc1": named_doc1,
        "n_named_test": sum(s.named for s in test),
        "n_train": len(train),
        "n_test": len(test),
        "needed_train": sum(y_train),
        "needed_test": sum(y_test),
    }


__all__ = ["FirstSearch", "balanced_accuracy", "bow_balanced_accuracy", "first_searches", "shortcut_accuracy"]
