"""Construct retrievers from an index directory or a server URL (the one entry point later stages use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from executor_sft.errors import ConfigError
from executor_sft.retrieval.base import Retriever
from executor_sft.retrieval.kinds import PART_BUILD_FLAGS, open_index, retriever_kind
from executor_sft.retrieval.manifest import MANIFEST_NAME, Manifest
from executor_sft.urls import check_url


def load_retriever(directory: str | Path, kind: str = "bm25", **opts: Any) -> Retriever:
    """Load a retriever of `kind` (see `kinds.RETRIEVERS`) from an index directory built by `build_index`.

    Options: corpus (check the index was built from this file), mmap (default "auto": memory-map
    the index files when they exceed `kinds.MMAP_ABOVE_BYTES`, else read them into memory); then
    the kind's own: dense: model / passage_prefix / dim / pooling / index_type (must match the
    build, else IndexMismatchError), query_prefix, device, fp16, batch_size, ef_search, nprobe;
    hybrid/rrf: those and weights (dense, bm25), depth, rrf_k, normalization (theoretical |
    minmax | zscore); the rerank stages (cross_encoder, llm_rerank, dense_rescore): over (the
    kind below, default bm25, with its own options alongside) and rerank (`rerank.RerankSettings`:
    model, top_n, batch_size, window, ...). An option no loader used is a `ConfigError`.
    """
    retriever_kind(kind)  # an unknown kind fails before the index is read
    index = open_index(directory, corpus=opts.pop("corpus", None), mmap=opts.pop("mmap", "auto"))
    r = index.load(kind, opts)
    if opts:
        raise ConfigError(f"unknown options for a {kind} retriever: {sorted(opts)}")
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
    kind: str = "bm25"  # a registered retriever kind or `package.module:attr`
    k: int = Field(3, ge=1)
    corpus: str | None = None  # check the index was built from this file
    options: dict[str, Any] = Field(default_factory=dict)  # passed to load_retriever
    cache: CacheConfig = Field(default_factory=CacheConfig)
    timeout_s: float = 60.0
    max_retries: int = 5

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return None if url is None else check_url(url)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        retriever_kind(kind)
        return kind

    @model_validator(mode="after")
    def _one_source(self) -> RetrieverConfig:
        if (self.index is None) == (self.url is None):
            raise ValueError("RetrieverConfig needs exactly one of `index` (a directory) or `url` (a server)")
        check = retriever_kind(self.kind).check
        if check is not None and self.index is not None:
            check(self.options)
        return self

    def preflight(self) -> list[tuple[str, str]]:
        """(field, what to do) for an index that is not built, or built without the parts this
        kind reads, and for a missing corpus; read from the manifest alone (`executor_sft.preflight`)."""
        problems = []
        if self.index is not None:
            needs = retriever_kind(self.kind).needs
            manifest = Path(self.index) / MANIFEST_NAME
            build = f"recipes/build_index.py --corpus CORPUS --output {self.index} {self._build_flags(needs)}"
            if not manifest.is_file():
                problems.append(
                    (
                        "index",
                        f"{self.index}: no index there ({MANIFEST_NAME} missing); build it with {build}",
                    )
                )
            else:
                missing = [part for part in needs if part not in Manifest.load(self.index).kinds]
                if missing:
                    problems.append(
                        (
                            "index",
                            f"{self.index}: built without its {' and '.join(missing)} part, which a "
                            f"{self.kind} retriever reads; build it with {build}",
                        )
                    )
        if self.corpus is not None and not Path(self.corpus).is_file():
            problems.append(
                ("corpus", f"{self.corpus}: no such file; give the corpus the index was built from")
            )
        return problems

    def _build_flags(self, needs: tuple[str, ...]) -> str:
        flags = [PART_BUILD_FLAGS.get(part, part) for part in needs or ("bm25",)]
        model = self.options.get("model")
        return " ".join(f.replace("MODEL", str(model)) if model else f for f in flags)

    def endpoints(self) -> list[tuple[str, str]]:
        """(field, URL) pairs that must answer an HTTP GET before a run starts."""
        return [("url", f"{self.url.rstrip('/')}/health")] if self.url is not None else []


def build_retriever(cfg: RetrieverConfig | dict[str, Any]) -> Retriever:
    """Index (any kind, rerank stages included) or server, then an optional cache (outermost)."""
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
    if cfg.cache.enabled:
        from executor_sft.retrieval.cache import CachedRetriever

        r = CachedRetriever(r, maxsize=cfg.cache.maxsize, path=cfg.cache.path)
    return r
