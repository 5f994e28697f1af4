"""Document access (the executor's `open_document`): `Corpus.document`, the retrievers that read
an index's passages, and the server's `POST /documents` with its limit."""

from __future__ import annotations

import httpx

from executor_sft.llm.server import BackgroundServer
from executor_sft.retrieval import (
    BM25Retriever,
    CachedRetriever,
    Corpus,
    HybridRetriever,
    Passage,
    RankBM25Retriever,
)
from executor_sft.retrieval.server import ServerConfig, create_app

PASSAGES = [
    Passage("a1", "Arno", "The Arno rises on Mount Falterona."),
    Passage("b1", "Brenta", "The Brenta flows into the Adriatic."),
    Passage("a2", "Arno", "It crosses Florence and Pisa."),
    Passage("u1", "", "An untitled note."),
]


def test_a_document_is_every_passage_of_its_title_in_corpus_order():
    corpus = Corpus.from_passages(PASSAGES)
    doc = corpus.document("a2")
    assert (doc.id, doc.title) == ("a2", "Arno")
    assert doc.text == "The Arno rises on Mount Falterona.\n\nIt crosses Florence and Pisa."
    assert corpus.document("b1").text == "The Brenta flows into the Adriatic."
    assert corpus.document("u1") == PASSAGES[3]  # an untitled passage is its own document
    assert corpus.document("zz") is None


def test_wrappers_read_the_documents_of_the_index_they_wrap():
    corpus = Corpus.from_passages(PASSAGES)
    bm25 = BM25Retriever.build(corpus)
    expected = bm25.documents(["a1", "zz"])
    assert expected[0].text.endswith("Pisa.") and expected[1] is None
    assert CachedRetriever(bm25).documents(["a1", "zz"]) == expected
    assert HybridRetriever([bm25, RankBM25Retriever(corpus)]).documents(["a1", "zz"]) == expected


def test_server_documents_limit():
    app = create_app(
        BM25Retriever.build(Corpus.from_passages(PASSAGES)), ServerConfig(batching=False, max_queries=2)
    )
    with BackgroundServer(app) as server:
        url = server.base_url.removesuffix("/v1")
        ok = httpx.post(f"{url}/documents", json={"ids": ["b1", "zz"]})
        over = httpx.post(f"{url}/documents", json={"ids": ["a1", "a2", "b1"]})
        empty = httpx.post(f"{url}/documents", json={"ids": []})
    assert ok.json() == {"documents": [{"id": "b1", "title": "Brenta", "text": PASSAGES[1].text}, None]}
    assert over.status_code == 422 and "3 ids exceed the limit of 2" in over.json()["detail"]
    assert empty.status_code == 422
