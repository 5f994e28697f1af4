"""The cache's async path: identical in-flight queries run once, concurrent misses share batch calls."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from executor_sft.retrieval import BM25Retriever, CachedRetriever, load_corpus
from executor_sft.retrieval.base import Retriever


class Recording(BM25Retriever):
    """A real BM25 retriever that records every batch it is asked for."""

    def __init__(self, inner: BM25Retriever, batch_invariant: bool = True):
        super().__init__(inner.model, inner.corpus, inner.info, inner.index_id)
        self.batch_invariant = batch_invariant
        self.batches: list[list[str]] = []

    def search(self, queries, k):
        self.batches.append(list(queries))
        return super().search(queries, k)


class Failing(Retriever):
    index_id = "failing"

    def search(self, queries, k):
        raise RuntimeError("index offline")


@pytest.fixture(scope="module")
def small_bm25(minibench_corpus_path, tmp_path_factory) -> BM25Retriever:
    path = tmp_path_factory.mktemp("small_corpus") / "corpus.jsonl"
    with open(minibench_corpus_path, encoding="utf-8") as src:
        path.write_text("".join(itertools.islice(src, 2000)), encoding="utf-8")
    return BM25Retriever.build(load_corpus(path))


@pytest.fixture(scope="module")
def queries(dev_questions) -> list[str]:
    return [q["question"] for q in dev_questions[:24]]


async def _concurrently(cached: CachedRetriever, queries: list[str], k: int = 3):
    return await asyncio.gather(*(cached.asearch([q], k) for q in queries))


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_concurrent_searches_equal_one_at_a_time_and_each_query_runs_once(
    small_bm25, queries, batch_invariant
):
    expected = [small_bm25.search([q], 3) for q in queries]
    inner = Recording(small_bm25, batch_invariant)
    cached = CachedRetriever(inner)
    # every query asked three times at once (teacher, student, counterfactual)
    got = asyncio.run(_concurrently(cached, queries * 3))
    assert got == expected * 3
    ran = [q for batch in inner.batches for q in batch]
    assert sorted(ran) == sorted(set(queries))  # coalesced: no query retrieved twice
    if batch_invariant:
        assert len(inner.batches) <= 2  # the first miss starts a batch, the rest join the next one
    else:
        assert len(inner.batches) == len(set(queries))  # no cross-caller batching
    assert cached.misses == 3 * len(queries) and cached.hits == 0
    # a later call is served from the cache
    assert asyncio.run(cached.asearch(queries[:2], 3)) == [e[0] for e in expected[:2]]
    assert len([q for b in inner.batches for q in b]) == len(set(queries)) and cached.hits == 2


def test_a_failed_batch_reaches_every_waiter_and_is_not_cached():
    cached = CachedRetriever(Failing())

    async def main():
        return await asyncio.gather(*(cached.asearch(["q"], 3) for _ in range(3)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "offline" in str(r) for r in results)
    with pytest.raises(RuntimeError):
        asyncio.run(cached.asearch(["q"], 3))  # retried, not served from a cached failure
