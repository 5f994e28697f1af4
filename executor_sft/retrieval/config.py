"""Construct retrievers from an index directory or a server URL (the one entry point later stages use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from executor_sft.retrieval.base import Retriever
from executor_sft.retrieval.bm25 import BM25Retriever, RankBM25Retriever
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.dense import DenseRetriever, apply_search_params
from executor_sft.retrieval.encoders import Encoder, EncoderConfig, resolve_model
from executor_sft.retrieval.fusion import HybridRetriever
from executor_sft.retrieval.manifest import IndexMismatchError, Manifest, check_corpus, check_option

Kind = Literal["bm25", "rank_bm25", "dense", "hybrid", "rrf"]
KINDS = ("bm25", "rank_bm25", "dense", "hybrid", "rrf")


def _load_dense(directory: Path, manifest: Manifest, docs: Corpus, opts: dict[str, Any]) -> DenseRetriever:
    info = manifest.dense
    if info is None or "dense" not in manifest.kinds:
        raise IndexMismatchError(
            f"index {directory} has no dense index (kinds: {manifest.kinds}); build it with --dense MODEL"
        )
    model = opts.pop("model", None)
    if model is not None and model != info.model and resolve_model(model) != info.model_path:
        raise IndexMismatchError(
            f"index {directory} was embedded with encoder {info.model!r} ({info.model_path}), "
            f"but encoder {model!r} was requested; queries must use the same encoder as the passages"
        )
    check_option(directory, "passage_prefix", info.passage_prefix, opts.pop("passage_prefix", None))
    check_option(directory, "dim", info.dim, opts.pop("dim", None))
    check_option(directory, "pooling", info.pooling, opts.pop("pooling", None))
    check_option(directory, "index_type", info.index_type, opts.pop("index_type", None))
    cfg = EncoderConfig(
        model=info.model_path,
        backend=info.backend,
        pooling=info.pooling if info.pooling != "sentence-transformers" else "mean",
        query_prefix=opts.pop("query_prefix", info.query_prefix),
        passage_prefix=info.passage_prefix,
        dim=info.dim if info.dim != info.full_dim else None,
        max_length=info.max_length,
        device=opts.pop("device", None),
        fp16=opts.pop("fp16", None),
    )
    index = DenseRetriever.read_index(directory / "dense" / "index.faiss", mmap=opts.pop("mmap", True))
    params = {**info.index_params, **{k: opts.pop(k) for k in ("ef_search", "nprobe") if k in opts}}
    apply_search_params(index, info.index_type, params)
    r = DenseRetriever(Encoder(cfg), index, docs, batch_size=opts.pop("batch_size", 64))
    if opts:
        raise TypeError(f"unknown options for a dense retriever: {sorted(opts)}")
    r.index_id = manifest.index_id("dense")
    return r


MMAP_ABOVE_BYTES = 1 << 30
"""Index files above this size are memory-mapped: a 21M-passage index must not be copied into
RAM per process, while a small one read into memory is faster (bm25s on numpy memmaps pays
Python overhead per access: ~1/5 of BM25 time in a py-spy profile of collection over minibench)."""


def _index_bytes(directory: Path) -> int:
    return sum(
        f.stat().st_size for sub in ("bm25", "dense") for f in (directory / sub).rglob("*") if f.is_file()
    )


def load_retriever(directory: str | Path, kind: Kind = "bm25", **opts: Any) -> Retriever:
    """Load a retriever of `kind` from an index directory built by `build_index`.

    Options: corpus (check the index was built from this file), mmap (default "auto": memory-map
    the index files when they exceed `MMAP_ABOVE_BYTES`, else read them into memory), model /
    passage_prefix / dim / pooling / index_type (must match the build, else IndexMismatchError),
    query_prefix, device, fp16, batch_size, ef_search, nprobe; hybrid/rrf: weights
    (dense, bm25), depth, rrf_k, normalization (theoretical | minmax | zscore).
    """
    directory = Path(directory)
    manifest = Manifest.load(directory)
    if kind not in KINDS:
        raise ValueError(f"retriever kind {kind!r}: expected one of {KINDS}")
    corpus = opts.pop("corpus", None)
    if corpus is not None:
        check_corpus(manifest, corpus, directory)
    docs = Corpus.load(directory / "docs.arrow")
    if kind in ("bm25", "hybrid", "rrf") and "bm25" not in manifest.kinds:
        raise IndexMismatchError(
            f"index {directory} has no BM25 index (kinds: {manifest.kinds}); build it with --bm25"
        )
    mmap = opts.pop("mmap", "auto")
    if mmap == "auto":
        mmap = _index_bytes(directory) > MMAP_ABOVE_BYTES
    if kind == "rank_bm25":
        r: Retriever = RankBM25Retriever(
            docs, manifest.bm25.model_copy(update={"backend": "rank_bm25"}) if manifest.bm25 else None
        )
        r.index_id = manifest.index_id("rank_bm25")
    elif kind == "bm25":
        r = BM25Retriever.load(
            directory / "bm25", docs, manifest.bm25, mmap=mmap, index_id=manifest.index_id("bm25")
        )
    elif kind == "dense":
        r = _load_dense(directory, manifest, docs, {**opts, "mmap": mmap})
        opts.clear()
    else:
        fusion = {k: opts.pop(k) for k in ("weights", "depth", "rrf_k", "normalization") if k in opts}
        dense = _load_dense(directory, manifest, docs, {**opts, "mmap": mmap})
        opts.clear()
        bm25 = BM25Retriever.load(
            directory / "bm25", docs, manifest.bm25, mmap=mmap, index_id=manifest.index_id("bm25")
        )
        r = HybridRetriever([dense, bm25], method="weighted" if kind == "hybrid" else "rrf", **fusion)
    if opts:
        raise TypeError(f"unknown options for a {kind} retriever: {sorted(opts)}")
    return r


class CacheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    maxsize: int = 100_000
    path: str | None = None  # sqlite file for a persistent cache


class RetrieverConfig(BaseModel):
    """Where retrieval comes from (an index directory OR a server URL) and how it is used."""

    model_config = ConfigDict(extra="forbid")
    index: str | None = None
    url: str | None = None
    kind: Kind = "bm25"
    k: int = Field(3, ge=1)
    corpus: str | None = None  # check the index was built from this file
    options: dict[str, Any] = Field(default_factory=dict)  # passed to load_retriever
    reranker: str | None = None  # a cross-encoder path/name
    rerank_depth: int = 20
    cache: CacheConfig = Field(default_factory=CacheConfig)
    timeout_s: float = 60.0
    max_retries: int = 5

    @model_validator(mode="after")
    def _one_source(self) -> RetrieverConfig:
        if (self.index is None) == (self.url is None):
            raise ValueError("RetrieverConfig needs exactly one of `index` (a directory) or `url` (a server)")
        return self


def build_retriever(cfg: RetrieverConfig | dict[str, Any]) -> Retriever:
    """Index or server, then an optional reranker, then an optional cache (outermost)."""
    if isinstance(cfg, dict):
        cfg = RetrieverConfig.model_validate(cfg)
    if cfg.url is not None:
        from executor_sft.retrieval.remote import RemoteRetriever

        r: Retriever = RemoteRetriever(cfg.url, timeout=cfg.timeout_s, max_retries=cfg.max_retries)
    else:
        opts = dict(cfg.options)
        if cfg.corpus is not None:
            opts["corpus"] = cfg.corpus
        r = load_retriever(cfg.index, cfg.kind, **opts)
    if cfg.reranker:
        from executor_sft.retrieval.rerank import RerankRetriever

        r = RerankRetriever(r, cfg.reranker, depth=cfg.rerank_depth)
    if cfg.cache.enabled:
        from executor_sft.retrieval.cache import CachedRetriever

        r = CachedRetriever(r, maxsize=cfg.cache.maxsize, path=cfg.cache.path)
    return r
