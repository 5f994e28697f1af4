"""Dense retrieval: a FAISS inner-product index (Flat, HNSW or IVF-PQ) over normalised embeddings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from executor_sft.retrieval.base import CorpusRetriever
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.encoders import Encoder

INDEX_TYPES = ("flat", "hnsw", "ivfpq")


def _pq_subquantizers(dim: int) -> int:
    """Largest divisor of dim giving >= 4 dims per sub-quantizer (48 for 384, 96 for 768)."""
    for m in range(dim // 4, 0, -1):
        if dim % m == 0:
            return m
    return 1


def make_faiss_index(embeddings: np.ndarray, index_type: str = "flat", **params: Any):
    """Build and fill an inner-product index; returns (index, the parameters used)."""
    import faiss

    n, dim = embeddings.shape
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    if index_type == "flat":
        index, used = faiss.IndexFlatIP(dim), {}
    elif index_type == "hnsw":
        m = int(params.get("hnsw_m", 32))
        index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(params.get("ef_construction", 200))
        used = {
            "hnsw_m": m,
            "ef_construction": index.hnsw.efConstruction,
            "ef_search": int(params.get("ef_search", 128)),
        }
    elif index_type == "ivfpq":
        # Enough training points per centroid (FAISS wants ~39) and per PQ code (2**nbits).
        nlist = int(params.get("nlist") or max(1, min(int(4 * math.sqrt(n)), n // 39)))
        pq_m = int(params.get("pq_m") or _pq_subquantizers(dim))
        nbits = int(
            params.get("nbits") or (8 if n >= 256 * 39 else max(1, min(8, int(math.log2(max(2, n // 39))))))
        )
        index = faiss.index_factory(dim, f"IVF{nlist},PQ{pq_m}x{nbits}", faiss.METRIC_INNER_PRODUCT)
        train = x if n <= 200_000 else x[np.random.default_rng(0).choice(n, 200_000, replace=False)]
        index.train(train)
        used = {
            "nlist": nlist,
            "pq_m": pq_m,
            "nbits": nbits,
            "nprobe": int(params.get("nprobe", min(nlist, 32))),
        }
    else:
        raise ValueError(f"index type {index_type!r}: expected one of {INDEX_TYPES}")
    index.add(x)
    return index, used


def apply_search_params(index, index_type: str, params: dict[str, Any]) -> None:
    import faiss

    if index_type == "hnsw":
        index.hnsw.efSearch = int(params.get("ef_search", 128))
    elif index_type == "ivfpq":
        faiss.extract_index_ivf(index).nprobe = int(params.get("nprobe", 32))


class DenseRetriever(CorpusRetriever):
    def __init__(
        self, encoder: Encoder, index, corpus: Corpus, index_id: str = "dense", batch_size: int = 64
    ):
        if index.ntotal != len(corpus):
            raise ValueError(
                f"FAISS index holds {index.ntotal} vectors but the corpus has {len(corpus)} passages"
            )
        self.encoder, self.index, self.corpus, self.index_id = encoder, index, corpus, index_id
        self.batch_size = batch_size

    @classmethod
    def from_embeddings(
        cls, encoder: Encoder, embeddings: np.ndarray, corpus: Corpus, index_type: str = "flat", **params: Any
    ) -> DenseRetriever:
        index, used = make_faiss_index(embeddings, index_type, **params)
        apply_search_params(index, index_type, used)
        return cls(encoder, index, corpus)

    @staticmethod
    def read_index(path: str | Path, mmap: bool = True):
        import faiss

        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            return faiss.read_index(str(path), flags)
        except RuntimeError:  # not every index type supports mmap
            return faiss.read_index(str(path))

    def top_rows(self, queries: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        scores, rows = self.index.search(self.encoder.encode_queries(queries, self.batch_size), k)
        return [(r[r >= 0], s[r >= 0]) for s, r in zip(scores, rows, strict=True)]  # FAISS pads with -1
