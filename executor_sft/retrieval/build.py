"""Build an index directory: passages, BM25, dense embeddings (sharded, resumable), FAISS, manifest.

Layout of DIR:
    manifest.json        what built it (corpus fingerprint, kinds, encoder, prefixes, versions)
    docs.arrow           the passages (id, title, text), memory-mapped at load
    bm25/                bm25s index (memory-mapped at load)
    dense/shards/emb_00000.npy ...  embeddings, one file per `shard_size` passages
    dense/index.faiss    the FAISS index merged from the shards

Embedding is the slow part, so it is sharded: a finished shard is never recomputed (a
crashed build resumes), and shards can be split across processes (`accelerate launch`:
shard i goes to rank i % world_size) and machines (`num_shards/shard_index`). A worker that
is one of several machines only embeds; a later run over all shards (everything already
embedded) merges them into the FAISS index.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from executor_sft.retrieval.bm25 import BM25Retriever
from executor_sft.retrieval.corpus import Corpus, file_fingerprint
from executor_sft.retrieval.dense import INDEX_TYPES, apply_search_params, make_faiss_index
from executor_sft.retrieval.encoders import Encoder, EncoderConfig
from executor_sft.retrieval.manifest import (
    BM25Info,
    CorpusInfo,
    DenseInfo,
    IndexMismatchError,
    Manifest,
    library_versions,
)

logger = logging.getLogger(__name__)


@dataclass
class BuildResult:
    output: Path
    kinds: list[str]
    num_docs: int
    complete: bool  # False when this worker only embedded its shards
    embedded_shards: int = 0
    skipped_shards: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"index {self.output}: {self.num_docs} passages, kinds={self.kinds}"]
        if self.embedded_shards or self.skipped_shards:
            parts.append(f"shards embedded={self.embedded_shards} skipped(done)={self.skipped_shards}")
        parts.append("complete" if self.complete else "partial: run again without --shard-index to merge")
        parts.append(" ".join(f"{k}={v:.1f}s" for k, v in self.seconds.items()))
        return "; ".join(parts)


def _worker() -> tuple[int, int, Any]:
    """(rank, world_size, state) from accelerate when launched with it, else (0, 1, None)."""
    try:
        from accelerate import PartialState

        state = PartialState()
        return state.process_index, state.num_processes, state
    except Exception:  # accelerate missing or not configured: a single process
        return 0, 1, None


def shard_path(directory: Path, i: int) -> Path:
    return directory / f"emb_{i:05d}.npy"


def embed_shards(
    corpus: Corpus,
    encoder: Encoder,
    shard_dir: Path,
    shard_size: int,
    batch_size: int = 64,
    workers: tuple[int, int] = (0, 1),
) -> tuple[int, int]:
    """Embed this worker's shards (index % n_workers == worker); returns (embedded, skipped)."""
    worker, n_workers = workers
    shard_dir.mkdir(parents=True, exist_ok=True)
    n_shards = max(1, -(-len(corpus) // shard_size))
    mine = [i for i in range(n_shards) if i % n_workers == worker]
    todo = [i for i in mine if not shard_path(shard_dir, i).exists()]
    texts_total = sum(min(shard_size, len(corpus) - i * shard_size) for i in todo)
    bar = tqdm(total=texts_total, desc=f"embed (worker {worker}/{n_workers})", unit="psg", disable=not todo)
    for i in todo:
        sub = corpus.table.slice(i * shard_size, shard_size)
        texts = Corpus(sub).index_texts()
        parts = []
        for j in range(0, len(texts), batch_size):
            parts.append(encoder.encode_passages(texts[j : j + batch_size], batch_size))
            bar.update(len(parts[-1]))
        emb = np.concatenate(parts).astype(np.float16 if encoder.dim >= 1024 else np.float32)
        tmp = shard_path(shard_dir, i).with_suffix(".tmp.npy")
        np.save(tmp, emb)
        tmp.replace(shard_path(shard_dir, i))  # atomic: a crash never leaves a half shard
    bar.close()
    return len(todo), len(mine) - len(todo)


def load_shards(shard_dir: Path, n_docs: int, shard_size: int) -> np.ndarray:
    n_shards = max(1, -(-n_docs // shard_size))
    missing = [i for i in range(n_shards) if not shard_path(shard_dir, i).exists()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} embedding shards missing in {shard_dir} (e.g. {missing[:5]})"
        )
    emb = np.concatenate([np.load(shard_path(shard_dir, i)) for i in range(n_shards)]).astype(np.float32)
    if emb.shape[0] != n_docs:
        raise ValueError(f"shards in {shard_dir} hold {emb.shape[0]} vectors for {n_docs} passages")
    return emb


def build_index(
    corpus: str | Path,
    output: str | Path,
    bm25: bool = True,
    dense: str | None = None,
    index_type: str = "flat",
    encoder: EncoderConfig | None = None,
    batch_size: int = 64,
    shard_size: int = 4096,
    num_shards: int = 1,
    shard_index: int = 0,
    index_params: dict[str, Any] | None = None,
    bm25_info: BM25Info | None = None,
) -> BuildResult:
    """Build (or resume building) the index directory `output` from the corpus file `corpus`."""
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index type {index_type!r}: expected one of {INDEX_TYPES}")
    if not bm25 and not dense:
        raise ValueError("nothing to build: ask for --bm25 and/or --dense MODEL")
    corpus_path, out = Path(corpus), Path(output)
    out.mkdir(parents=True, exist_ok=True)
    rank, world, state = _worker()
    main = rank == 0 and shard_index == 0
    times: dict[str, float] = {}

    t = time.perf_counter()
    fingerprint = file_fingerprint(corpus_path)
    info = CorpusInfo(
        path=str(corpus_path.resolve()),
        size_bytes=corpus_path.stat().st_size,
        fingerprint=fingerprint,
        num_docs=0,
    )
    prior = Manifest.load(out) if (out / "manifest.json").exists() else None
    if prior is not None and prior.corpus.fingerprint != fingerprint:
        raise IndexMismatchError(
            f"{out} already holds an index of {prior.corpus.path} (fingerprint {prior.corpus.fingerprint}); "
            f"{corpus_path} differs: use a new output directory"
        )
    docs_path = out / "docs.arrow"
    if docs_path.exists():
        docs = Corpus.load(docs_path)
    else:
        docs = Corpus.from_file(corpus_path)
        if main:
            docs.save(docs_path)
    info.num_docs = len(docs)
    times["corpus"] = time.perf_counter() - t
    manifest = prior or Manifest(corpus=info)
    manifest.versions = library_versions()

    if bm25 and main:
        t = time.perf_counter()
        binfo = bm25_info or BM25Info()
        BM25Retriever.build(docs, binfo, show_progress=True).save(out / "bm25")
        manifest.bm25 = binfo
        times["bm25"] = time.perf_counter() - t

    embedded = skipped = 0
    complete = True
    if dense:
        t = time.perf_counter()
        cfg = encoder or EncoderConfig(model=dense)
        cfg.model = dense
        enc = Encoder(cfg)
        dense_dir = out / "dense"
        meta = _dense_info(cfg, enc, index_type, shard_size)
        _check_resume(manifest.dense, meta, out)
        n_workers = world * num_shards
        worker = shard_index * world + rank
        embedded, skipped = embed_shards(
            docs, enc, dense_dir / "shards", shard_size, batch_size, (worker, n_workers)
        )
        times["embed"] = time.perf_counter() - t
        if state is not None and world > 1:
            state.wait_for_everyone()
        complete = num_shards == 1
        if complete and rank == 0:
            t = time.perf_counter()
            emb = load_shards(dense_dir / "shards", len(docs), shard_size)
            index, used = make_faiss_index(emb, index_type, **(index_params or {}))
            apply_search_params(index, index_type, used)
            import faiss

            faiss.write_index(index, str(dense_dir / "index.faiss.tmp"))
            (dense_dir / "index.faiss.tmp").replace(dense_dir / "index.faiss")
            meta.index_params, meta.num_vectors = used, index.ntotal
            manifest.dense = meta
            times["faiss"] = time.perf_counter() - t
        elif main:
            manifest.dense = meta  # records the encoder so other machines' shards are checked

    if main:
        manifest.kinds = sorted(
            {*manifest.kinds, *(["bm25"] if bm25 else []), *(["dense"] if dense and complete else [])}
        )
        manifest.save(out)
    return BuildResult(out, manifest.kinds, len(docs), complete, embedded, skipped, times)


def _dense_info(cfg: EncoderConfig, enc: Encoder, index_type: str, shard_size: int) -> DenseInfo:
    return DenseInfo(
        model=cfg.model,
        model_path=enc.model_path,
        backend=enc.backend,
        pooling=enc.pooling,
        query_prefix=enc.query_prefix,
        passage_prefix=enc.passage_prefix,
        dim=enc.dim,
        full_dim=enc.full_dim,
        max_length=cfg.max_length,
        index_type=index_type,
        shard_size=shard_size,
    )


def _check_resume(prior: DenseInfo | None, new: DenseInfo, out: Path) -> None:
    """Shards from another encoder or prefix must not be mixed into this index."""
    if prior is None:
        return
    keys = ("model", "pooling", "passage_prefix", "dim", "max_length", "shard_size")
    diff = {k: (getattr(prior, k), getattr(new, k)) for k in keys if getattr(prior, k) != getattr(new, k)}
    if diff:
        detail = ", ".join(f"{k}: built {a!r} vs now {b!r}" for k, (a, b) in diff.items())
        raise IndexMismatchError(
            f"{out}/dense was built with other encoder settings ({detail}); use a new output directory"
        )
