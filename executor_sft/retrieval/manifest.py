"""The index manifest: what built an index directory, so a mismatched load fails loudly.

A retriever loaded with a different encoder, prefix or corpus than the index was built with
returns plausible-looking garbage; the manifest turns that into a clear error instead.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from executor_sft.errors import MissingFileError, UserError

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "executor_sft.index/v1"

BM25_LIBRARIES = ("bm25s", "PyStemmer", "numpy", "scipy")
"""Distributions whose version decides a BM25 index's contents (tokens, stems, stopwords, scores)."""
DENSE_LIBRARIES = (
    "faiss-cpu",
    "faiss-gpu",
    "faiss-gpu-cu12",
    "sentence-transformers",
    "transformers",
    "torch",
)
"""Distributions whose version decides a dense index's vectors and FAISS structure."""


class IndexMismatchError(UserError, ValueError):
    """The index directory was built with options other than the ones requested."""


class CorpusInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    path: str
    size_bytes: int
    fingerprint: str
    num_docs: int


class BM25Info(BaseModel):
    model_config = ConfigDict(extra="allow")
    backend: str = "bm25s"
    stemmer: str | None = "english"
    stopwords: str | None = "en"
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    versions: dict[str, str] = Field(default_factory=dict)
    """BM25_LIBRARIES as installed when this part was built; empty in manifests that predate it."""


class DenseInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    model_path: str
    backend: str
    pooling: str
    query_prefix: str
    passage_prefix: str
    dim: int
    full_dim: int
    max_length: int
    index_type: str
    index_params: dict[str, Any] = Field(default_factory=dict)
    num_vectors: int = 0
    shard_size: int = 0
    versions: dict[str, str] = Field(default_factory=dict)
    """DENSE_LIBRARIES as installed when this part was built; empty in manifests that predate it."""


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_: str = Field(MANIFEST_SCHEMA, alias="schema")
    corpus: CorpusInfo
    kinds: list[str] = Field(default_factory=list)
    """The index parts built ("bm25", "dense"); retriever kinds name the parts they read."""
    bm25: BM25Info | None = None
    dense: DenseInfo | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    created_at: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def index_id(self, kind: str, parts: Iterable[str]) -> str:
        """Names the searchable contents (corpus + the built `parts` a `kind` reads), for cache keys."""
        used = set(parts)
        key: dict[str, Any] = {"corpus": self.corpus.fingerprint, "kind": kind}
        if "bm25" in used and self.bm25:
            key["bm25"] = self.bm25.model_dump(exclude={"versions"})
        if "dense" in used and self.dense:
            key["dense"] = self.dense.model_dump(
                exclude={"num_vectors", "shard_size", "model_path", "versions"}
            )
        blob = json.dumps(key, sort_keys=True).encode()
        return f"{kind}-{hashlib.blake2b(blob, digest_size=8).hexdigest()}"

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / MANIFEST_NAME
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(by_alias=True, indent=2), encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        path = Path(directory) / MANIFEST_NAME
        if not path.exists():
            raise MissingFileError(f"{path} not found: is {directory} an index built by build_index?")
        return cls.model_validate_json(path.read_text(encoding="utf-8"))


DEFAULT_LIBRARIES = ("executor-sft", "pyarrow", "rank-bm25", *BM25_LIBRARIES, *DENSE_LIBRARIES)


def library_versions(names: tuple[str, ...] = DEFAULT_LIBRARIES) -> dict[str, str]:
    """Installed versions of `names` (absent ones left out), so a built index can be traced."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def check_corpus(manifest: Manifest, corpus_path: str | Path, directory: str | Path) -> None:
    """Fail if `corpus_path` is not the file the index was built from (size, then content hash)."""
    from executor_sft.retrieval.corpus import file_fingerprint

    p = Path(corpus_path)
    if not p.exists():
        raise MissingFileError(f"corpus not found: {p}")
    info = manifest.corpus
    size = p.stat().st_size
    if size != info.size_bytes or file_fingerprint(p) != info.fingerprint:
        raise IndexMismatchError(
            f"index {directory} was built from {info.path} ({info.size_bytes} bytes, fingerprint "
            f"{info.fingerprint}), but the corpus given is {p} ({size} bytes) with different contents; "
            "rebuild the index with recipes/build_index.py or pass the matching corpus"
        )


def check_option(directory: str | Path, what: str, built: Any, requested: Any) -> None:
    if requested is not None and built != requested:
        raise IndexMismatchError(
            f"index {directory} was built with {what}={built!r}, but {what}={requested!r} was requested; "
            "rebuild the index with the new option or drop the option to use the index as built"
        )
