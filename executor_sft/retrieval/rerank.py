"""Cross-encoder reranking over any retriever: fetch `depth` candidates, rescore, keep k."""

from __future__ import annotations

from executor_sft.retrieval.base import Hit, Retriever


class RerankRetriever(Retriever):
    """Wraps a retriever with a sentence-transformers `CrossEncoder` (a path, name or instance)."""

    def __init__(
        self, retriever: Retriever, model, depth: int = 20, batch_size: int = 32, max_length: int = 512
    ):
        from sentence_transformers import CrossEncoder

        if isinstance(model, str):
            self.model_name = model
            model = CrossEncoder(model, max_length=max_length)
        else:
            self.model_name = str(getattr(model, "model_name_or_path", None) or type(model).__name__)
        self.retriever, self.model, self.depth, self.batch_size = retriever, model, depth, batch_size
        self.index_id = f"rerank({retriever.index_id};{self.model_name};d{depth})"

    def rerank(self, query: str, hits: list[Hit], k: int) -> list[Hit]:
        if not hits:
            return []
        scores = self.model.predict(
            [(query, h.contents) for h in hits], batch_size=self.batch_size, show_progress_bar=False
        )
        scores = [float(s) if getattr(s, "ndim", 0) == 0 else float(s[-1]) for s in scores]
        order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:k]
        return [Hit(hits[i].doc_id, hits[i].title, hits[i].text, scores[i]) for i in order]

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        return self.retriever.documents(doc_ids)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        candidates = self.retriever.search(list(queries), max(k, self.depth))
        return [self.rerank(q, hits, k) for q, hits in zip(queries, candidates, strict=True)]
