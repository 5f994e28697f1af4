"""Retrieval: corpora, BM25 / dense / hybrid retrievers, rerank stages, caching, HTTP server and client.

Later stages construct retrievers with `build_retriever(RetrieverConfig(...))` or
`load_retriever(DIR, kind=...)` and only ever call `Retriever.search` / `asearch`. The kinds
are the `RETRIEVERS` registry (retrieval/kinds.py); a user adds one as shown in
docs/architecture.md, "A retriever kind".
"""

from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.retrieval.bm25 import BM25Retriever, RankBM25Retriever
from executor_sft.retrieval.build import BuildResult, build_index
from executor_sft.retrieval.cache import CachedRetriever
from executor_sft.retrieval.config import CacheConfig, RetrieverConfig, build_retriever, load_retriever
from executor_sft.retrieval.corpus import Corpus, CorpusFormatError, Passage, iter_corpus, load_corpus
from executor_sft.retrieval.dense import DenseRetriever
from executor_sft.retrieval.encoders import Encoder, EncoderConfig
from executor_sft.retrieval.fusion import HybridRetriever, fuse
from executor_sft.retrieval.kinds import RETRIEVERS, IndexDir, RetrieverKind
from executor_sft.retrieval.manifest import IndexMismatchError, Manifest
from executor_sft.retrieval.remote import RemoteRetriever, RetrievalError, RetrievalRefused
from executor_sft.retrieval.rerank import RerankRetriever, RerankSettings
from executor_sft.retrieval.scorers import Scorer

__all__ = [
    "RETRIEVERS",
    "BM25Retriever",
    "BuildResult",
    "CacheConfig",
    "CachedRetriever",
    "Corpus",
    "CorpusFormatError",
    "DenseRetriever",
    "Encoder",
    "EncoderConfig",
    "Hit",
    "HybridRetriever",
    "IndexDir",
    "IndexMismatchError",
    "Manifest",
    "Passage",
    "RankBM25Retriever",
    "RemoteRetriever",
    "RerankRetriever",
    "RerankSettings",
    "RetrievalError",
    "RetrievalRefused",
    "Retriever",
    "RetrieverConfig",
    "RetrieverKind",
    "Scorer",
    "build_index",
    "build_retriever",
    "fuse",
    "iter_corpus",
    "load_corpus",
    "load_retriever",
]
