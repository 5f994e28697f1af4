"""Retriever kinds: the one table of how each kind of retriever loads from an index directory.

A kind says which index parts it reads (`needs`: the parts `build_index` makes, "bm25" and
"dense") and how to make its retriever from the opened index (`load(index, options)`). The
loader pops the options it understands from `options`; whatever is left once the retriever is
made is reported as a typo. A kind may load other kinds from the same index (hybrid fuses dense
and bm25; a user's kind can wrap bm25), so a new kind over parts already built is one user file:
docs/architecture.md, "A retriever kind", has one. Built-ins register below the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor_sft.registry import Registry
from executor_sft.retrieval.base import Retriever
from executor_sft.retrieval.bm25 import BM25Retriever, RankBM25Retriever
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.dense import DenseRetriever, apply_search_params
from executor_sft.retrieval.encoders import Encoder, EncoderConfig, resolve_model
from executor_sft.retrieval.fusion import HybridRetriever
from executor_sft.retrieval.manifest import IndexMismatchError, Manifest, check_corpus, check_option
from executor_sft.retrieval.rerank import (
    RerankRetriever,
    RerankSettings,
    cross_encoder_scorer,
    dense_scorer,
    llm_yes_no_scorer,
    rerank_settings,
)
from executor_sft.retrieval.scorers import Scorer

PART_BUILD_FLAGS = {"bm25": "--bm25", "dense": "--dense MODEL"}
"""The index parts `build_index` makes, and the recipes/build_index.py flag that makes each."""

MMAP_ABOVE_BYTES = 1 << 30
"""Index files above this size are memory-mapped: a 21M-passage index must not be copied into
RAM per process, while a small one read into memory is faster (bm25s on numpy memmaps pays
Python overhead per access: ~1/5 of BM25 time in a py-spy profile of collection over minibench)."""


@dataclass(frozen=True)
class IndexDir:
    """An opened index directory: what every kind's loader reads from."""

    path: Path
    manifest: Manifest
    docs: Corpus
    mmap: bool

    def index_id(self, kind: str, parts: Iterable[str]) -> str:
        """Cache key of a retriever of `kind` over `parts` of this index."""
        return self.manifest.index_id(kind, parts)

    def load(self, kind: str, options: dict[str, Any]) -> Retriever:
        """A retriever of `kind` over this index (popping the options it uses from `options`)."""
        entry = retriever_kind(kind)
        missing = [part for part in entry.needs if part not in self.manifest.kinds]
        if missing:
            flags = " ".join(PART_BUILD_FLAGS.get(part, part) for part in missing)
            raise IndexMismatchError(
                f"index {self.path} has no {' and '.join(missing)} index (parts: {self.manifest.kinds}); "
                f"a {kind} retriever needs it: build it with {flags}"
            )
        return entry.load(self, options)


@dataclass(frozen=True)
class RetrieverKind:
    """How one kind of retriever is made from an index directory."""

    load: Callable[[IndexDir, dict[str, Any]], Retriever]
    needs: tuple[str, ...] = ()
    """Index parts the kind reads; loading from an index without them is a one-line error."""
    check: Callable[[dict[str, Any]], None] | None = None
    """Checks a config's `options` without loading anything (raises `ConfigError`), so a typo in
    a YAML file fails when the config is read, not after an index and a model have loaded."""


RETRIEVERS: Registry[RetrieverKind] = Registry("retriever kind")


def retriever_kind(name: str) -> RetrieverKind:
    """The kind `name` (a registered name or `package.module:attr`); else a one-line user error."""
    return RETRIEVERS.get_instance(
        name, RetrieverKind, "executor_sft.retrieval.RetrieverKind(load=..., needs=...)"
    )


def kinds_served(parts: Iterable[str]) -> list[str]:
    """The registered kinds an index holding `parts` can load."""
    have = set(parts)
    return [name for name in RETRIEVERS.names() if set(RETRIEVERS.get(name).needs) <= have]


def _index_bytes(directory: Path) -> int:
    return sum(
        f.stat().st_size for sub in ("bm25", "dense") for f in (directory / sub).rglob("*") if f.is_file()
    )


def open_index(
    directory: str | Path, corpus: str | Path | None = None, mmap: bool | str = "auto"
) -> IndexDir:
    """Read an index's manifest and passages; `corpus` (when given) must be the file it was built from."""
    directory = Path(directory)
    manifest = Manifest.load(directory)
    if corpus is not None:
        check_corpus(manifest, corpus, directory)
    docs = Corpus.load(directory / "docs.arrow")
    if mmap == "auto":
        mmap = _index_bytes(directory) > MMAP_ABOVE_BYTES
    return IndexDir(directory, manifest, docs, bool(mmap))


def _load_bm25(index: IndexDir, options: dict[str, Any]) -> Retriever:
    return BM25Retriever.load(
        index.path / "bm25",
        index.docs,
        index.manifest.bm25,
        mmap=index.mmap,
        index_id=index.index_id("bm25", ["bm25"]),
    )


def _load_rank_bm25(index: IndexDir, options: dict[str, Any]) -> Retriever:
    """Scores every passage per query from the stored passages; only the BM25 settings are reused."""
    info = index.manifest.bm25
    r = RankBM25Retriever(index.docs, info.model_copy(update={"backend": "rank_bm25"}) if info else None)
    r.index_id = index.index_id("rank_bm25", ["bm25"])
    return r


def _dense_encoder(index: IndexDir, options: dict[str, Any]) -> EncoderConfig:
    """The query encoder the passages were embedded with; a different one requested is an error."""
    info, directory = index.manifest.dense, index.path
    assert info is not None
    model = options.pop("model", None)
    if model is not None and model != info.model and resolve_model(model) != info.model_path:
        raise IndexMismatchError(
            f"index {directory} was embedded with encoder {info.model!r} ({info.model_path}), "
            f"but encoder {model!r} was requested; queries must use the same encoder as the passages"
        )
    for what in ("passage_prefix", "dim", "pooling", "index_type"):
        check_option(directory, what, getattr(info, what), options.pop(what, None))
    return EncoderConfig(
        model=info.model_path,
        backend=info.backend,
        pooling=info.pooling if info.pooling != "sentence-transformers" else "mean",
        query_prefix=options.pop("query_prefix", info.query_prefix),
        passage_prefix=info.passage_prefix,
        dim=info.dim if info.dim != info.full_dim else None,
        max_length=info.max_length,
        device=options.pop("device", None),
        fp16=options.pop("fp16", None),
    )


def _load_dense(index: IndexDir, options: dict[str, Any]) -> Retriever:
    info = index.manifest.dense
    if info is None:
        raise IndexMismatchError(f"index {index.path} lists a dense part but its manifest has no encoder")
    cfg = _dense_encoder(index, options)
    faiss_index = DenseRetriever.read_index(index.path / "dense" / "index.faiss", mmap=index.mmap)
    params = {**info.index_params, **{k: options.pop(k) for k in ("ef_search", "nprobe") if k in options}}
    apply_search_params(faiss_index, info.index_type, params)
    r = DenseRetriever(Encoder(cfg), faiss_index, index.docs, batch_size=options.pop("batch_size", 64))
    r.index_id = index.index_id("dense", ["dense"])
    return r


def _fused(method: str) -> Callable[[IndexDir, dict[str, Any]], Retriever]:
    def load(index: IndexDir, options: dict[str, Any]) -> Retriever:
        fusion = {k: options.pop(k) for k in ("weights", "depth", "rrf_k", "normalization") if k in options}
        dense = index.load("dense", options)
        return HybridRetriever([dense, index.load("bm25", options)], method=method, **fusion)

    return load


def rerank_kind(name: str, make_scorer: Callable[[RerankSettings], Scorer]) -> RetrieverKind:
    """A rerank stage over the kind named by option `over` (default bm25), scored by
    `make_scorer(options["rerank"])`; see retrieval/rerank.py."""

    def load(index: IndexDir, options: dict[str, Any]) -> Retriever:
        over = options.pop("over", "bm25")
        settings = rerank_settings(options, name)
        inner = index.load(over, options)
        return RerankRetriever(inner, make_scorer(settings), top_n=settings.top_n, name=name)

    def check(options: dict[str, Any]) -> None:
        retriever_kind(options.get("over", "bm25"))
        rerank_settings(dict(options), name)

    return RetrieverKind(load, check=check)


RETRIEVERS.register("bm25", RetrieverKind(_load_bm25, needs=("bm25",)))
RETRIEVERS.register("rank_bm25", RetrieverKind(_load_rank_bm25))
RETRIEVERS.register("dense", RetrieverKind(_load_dense, needs=("dense",)))
RETRIEVERS.register("hybrid", RetrieverKind(_fused("weighted"), needs=("bm25", "dense")))
RETRIEVERS.register("rrf", RetrieverKind(_fused("rrf"), needs=("bm25", "dense")))
RETRIEVERS.register("cross_encoder", rerank_kind("cross_encoder", cross_encoder_scorer))
RETRIEVERS.register("llm_rerank", rerank_kind("llm_rerank", llm_yes_no_scorer))
RETRIEVERS.register("dense_rescore", rerank_kind("dense_rescore", dense_scorer))
