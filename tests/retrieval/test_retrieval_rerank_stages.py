"""Rerank stages: chunking to the scorer's window, the yes/no LLM scorer, the dense re-scorer, a rerank server."""

from __future__ import annotations

import pytest
from retrieval_helpers import serve

from executor_sft.errors import ConfigError
from executor_sft.retrieval import Hit, Retriever, load_retriever
from executor_sft.retrieval.encoders import resolve_model
from executor_sft.retrieval.rerank import RerankRetriever
from executor_sft.retrieval.scorers import RemoteRerankScorer, Scorer, YesNoLLMScorer, split_to_window


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("minilm"))


class WordCount(Scorer):
    """Scores a pair by how often the query's words occur in the passage (known scores)."""

    name = "word-count"

    def __init__(self, tokenizer, window: int):
        self.tokenizer, self.window = tokenizer, window
        self.seen: list[tuple[str, str]] = []

    def score_pairs(self, pairs):
        self.seen.extend(pairs)
        return [float(sum(p.lower().split().count(w) for w in q.lower().split())) for q, p in pairs]


class Fixed(Retriever):
    index_id = "fixed"

    def __init__(self, hits: list[Hit]):
        self.hits = hits

    def search(self, queries, k):
        return [self.hits[:k] for _ in queries]


FILLER = " ".join(f"word{i}" for i in range(300))


def test_split_to_window_cuts_the_original_text_into_pieces_that_fit(minilm_tokenizer):
    pieces = split_to_window(minilm_tokenizer, FILLER, 50)
    assert len(pieces) > 2
    assert " ".join(pieces) == FILLER  # slices of the original text, nothing re-spelled
    assert all(len(minilm_tokenizer(p, add_special_tokens=False)["input_ids"]) <= 50 for p in pieces)
    assert split_to_window(minilm_tokenizer, "short text", 50) == ["short text"]


def test_a_long_document_scores_as_its_best_chunk_and_returns_that_chunk(minilm_tokenizer):
    long_doc = Hit("long", "Atlas", f"{FILLER} the needle lies here {FILLER}", 0.0)
    short_doc = Hit("short", "Brief", "one needle", 0.0)
    scorer = WordCount(minilm_tokenizer, window=64)
    stage = RerankRetriever(Fixed([short_doc, long_doc]), scorer, top_n=2)
    (hits,) = stage.search(["needle lies"], 2)
    assert [h.doc_id for h in hits] == ["long", "short"]
    assert hits[0].score == 2.0 and "needle lies here" in hits[0].text and len(hits[0].text) < 400
    assert hits[0].title == "Atlas" and not hits[0].text.startswith("Atlas")
    chunks = [p for _, p in scorer.seen if p.startswith("Atlas\n")]
    assert len(chunks) > 5 and all(
        len(minilm_tokenizer(c, add_special_tokens=False)["input_ids"])
        <= scorer.passage_budget("needle lies")
        for c in chunks
    )


def test_the_stage_keeps_k_of_top_n_by_score_ties_to_the_earlier_candidate(minilm_tokenizer):
    hits = [Hit(f"d{i}", "", text, 0.0) for i, text in enumerate(["x", "cat", "cat cat", "cat", "x"])]
    stage = RerankRetriever(Fixed(hits), WordCount(minilm_tokenizer, 64), top_n=4)
    (out,) = stage.search(["cat"], 3)
    assert [h.doc_id for h in out] == ["d2", "d1", "d3"]  # d4 is past top_n
    assert stage.index_id == "rerank(word-count;n4;w64)/fixed"


@pytest.mark.slow
def test_yes_no_llm_scores_p_yes_from_the_logits(smollm2):
    import torch

    scorer = YesNoLLMScorer("offline:smollm2", window=256, batch_size=2)
    pairs = [
        ("capital of France", "Paris is the capital of France."),
        ("capital of France", "Bananas are yellow."),
    ]
    pairs.append(("who wrote Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."))
    scores = scorer.score_pairs(pairs)
    model, tok = scorer.model, scorer.tokenizer
    for (q, p), got in zip(pairs, scores, strict=True):  # one at a time, no padding: the same P(yes)
        ids = tok(
            scorer.prompt.query(q) + scorer.prompt.document(p), add_special_tokens=False, return_tensors="pt"
        )
        with torch.inference_mode():
            logits = model(**ids).logits[0, -1]
        want = torch.softmax(torch.stack([logits[scorer.no], logits[scorer.yes]]).float(), 0)[1].item()
        assert got == pytest.approx(want, abs=1e-4) and 0.0 < got < 1.0
    assert scorer.prompt.query("q").startswith("<|im_start|>system\n")
    assert scorer.prompt.document("d").endswith("<|im_start|>assistant\n")  # SmolLM2 has no <think>


@pytest.mark.slow
def test_llm_and_dense_rerank_kinds_load_over_bm25(bm25_index, dev_questions):
    q = dev_questions[0]["question"]
    (candidates,) = load_retriever(bm25_index, "bm25").search([q], 6)
    for kind, rerank in (
        ("dense_rescore", {"top_n": 6}),
        ("llm_rerank", {"model": "offline:smollm2", "top_n": 6}),
    ):
        r = load_retriever(bm25_index, kind, over="bm25", rerank=rerank)
        (hits,) = r.search([q], 3)
        scores = r.scorer.score_pairs([(q, h.contents) for h in candidates])
        assert [h.doc_id for h in hits] == [
            candidates[i].doc_id for i in sorted(range(6), key=lambda i: -scores[i])[:3]
        ]
        assert r.index_id.startswith(f"{kind}(") and r.index_id.endswith("/" + r.inner.index_id)


def test_rerank_options_are_checked(bm25_index):
    with pytest.raises(ConfigError, match=r"options.rerank.top_nn: Extra inputs"):
        load_retriever(bm25_index, "dense_rescore", rerank={"top_nn": 5})
    with pytest.raises(ConfigError, match="rerank.model is required"):
        load_retriever(bm25_index, "llm_rerank")
    with pytest.raises(ConfigError, match=r"unknown options .*'dim'"):  # bm25 below takes no dim
        load_retriever(bm25_index, "dense_rescore", over="bm25", dim=64, rerank={"top_n": 5})


def test_remote_scorer_sends_the_yes_no_prompt_and_maps_results_back(minilm_tokenizer):
    from fastapi import FastAPI

    app, received = FastAPI(), []

    @app.post("/v1/rerank")
    def rerank(body: dict):
        received.append(body)
        scored = [(i, float(len(d))) for i, d in enumerate(body["documents"])]
        return {"results": [{"index": i, "relevance_score": s} for i, s in reversed(scored)]}

    with serve(app) as base:
        scorer = RemoteRerankScorer(f"{base}/v1", "Qwen/Qwen3-Reranker-4B", "yes_no",
                                    tokenizer=resolve_model("minilm"), batch_size=2)  # fmt: skip
        scores = scorer.score_pairs([("q1", "a"), ("q2", "bbb"), ("q1", "cc"), ("q1", "dddd")])
    assert [b["model"] for b in received] == ["Qwen/Qwen3-Reranker-4B"] * 3  # q1 in two batches of 2
    assert received[0]["query"].endswith("<Query>: q1\n") and received[0]["documents"][0].startswith(
        "<Document>: a"
    )
    assert received[0]["documents"][0].endswith("<think>\n\n</think>\n\n")
    suffix = len(scorer.prompt.document(""))
    assert scores == [1.0 + suffix, 3.0 + suffix, 2.0 + suffix, 4.0 + suffix]
