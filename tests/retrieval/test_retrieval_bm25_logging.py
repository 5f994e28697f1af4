"""bm25s sets its own logger to DEBUG on import; building and searching an index must not print
`DEBUG:bm25s:...` into a run whose log level is WARNING."""

from __future__ import annotations

import logging

from executor_sft.retrieval.bm25 import BM25Retriever
from executor_sft.retrieval.corpus import Corpus, Passage


def test_building_and_searching_log_no_bm25s_debug_lines(caplog):
    corpus = Corpus.from_passages(
        [Passage(f"p{i}", f"Title {i}", f"passage number {i} about topic {i % 3}") for i in range(12)]
    )
    with caplog.at_level(logging.WARNING):
        retriever = BM25Retriever.build(corpus)
        hits = retriever.search(["topic 1"], k=2)
    assert hits and hits[0]
    assert not [r for r in caplog.records if r.name.startswith("bm25s")], caplog.text
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.WARNING
