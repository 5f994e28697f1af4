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

DIR is never half-written: the build happens in `.DIR.partial` beside it (where a crashed or
split build resumes) and is renamed into place when complete. Adding a kind to a finished
index of the same corpus starts from hard links to its files; a non-empty DIR holding anything
else is refused unless `overwrite`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from executor_sft.errors import UserError
from executor_sft.files import check_output_dir, output_errors
from executor_sft.retrieval.bm25 import BM25Retriever
from executor_sft.retrieval.corpus import Corpus, CorpusFormatError, file_fingerprint
from executor_sft.retrieval.dense import INDEX_TYPES, apply_search_params, make_faiss_index
from executor_sft.retrieval.encoders import Encoder, EncoderConfig, EncoderLoadError, check_model_name
from executor_sft.retrieval.manifest import (
    BM25_LIBRARIES,
    DENSE_LIBRARIES,
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
        parts.append("complete" if self.complete else "partial: run again without --shard_index to merge")
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


class IndexBuildError(UserError, ValueError):
    """A build that cannot go ahead as asked (output location, options); the message says what to do."""


def staging_dir(out: Path) -> Path:
    """Where `out` is assembled: beside it, so the final rename stays on one filesystem.

    Its name is fixed so that a crashed or split (multi-machine) build finds its work again.
    """
    return out.parent / f".{out.name}.partial"


@dataclass
class _Stage:
    """One build in progress: where it is assembled and who this process is among the workers."""

    out: Path
    path: Path
    created: bool  # this call made `path` (so a failure before any work removes it)
    manifest: Manifest
    docs: Corpus
    rank: int
    world: int
    state: Any
    times: dict[str, float] = field(default_factory=dict)

    def wait_for_everyone(self) -> None:
        if self.state is not None and self.world > 1:
            self.state.wait_for_everyone()

    def abandon(self) -> None:
        """Remove a stage this call created, when the build stops before any part was made."""
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)


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
    overwrite: bool = False,
) -> BuildResult:
    """Build (or resume building, or add a kind to) the index directory `output` from `corpus`.

    The index is assembled in `staging_dir(output)` and renamed into place only when complete,
    so `output` is never half-written. A non-empty `output` that is not a complete index of the
    same corpus is refused unless `overwrite`. Every input is checked before an encoder loads;
    a full or read-only disk met while building is one `OutputError` line (the stage is kept).
    """
    _check_options(index_type, bm25, dense, num_shards, shard_index)
    with output_errors(output):
        stage = _open_stage(Path(corpus), Path(output), overwrite)
        main = stage.rank == 0 and shard_index == 0
        if bm25 and main:
            _build_bm25(stage, bm25_info)
        embedded = skipped = 0
        complete = True
        if dense:
            cfg = encoder or EncoderConfig(model=dense)
            cfg.model = dense
            embedded, skipped, complete = _build_dense(
                stage, cfg, index_type, index_params, batch_size, shard_size, (num_shards, shard_index), main
            )
        if main:
            _finish(
                stage, [*(["bm25"] if bm25 else []), *(["dense"] if dense and complete else [])], complete
            )
    where = stage.out if complete else stage.path
    return BuildResult(where, stage.manifest.kinds, len(stage.docs), complete, embedded, skipped, stage.times)


def _open_stage(corpus_path: Path, out: Path, overwrite: bool) -> _Stage:
    """Check the corpus and output, then open (create, resume or seed from `out`) the staging directory."""
    rank, world, state = _worker()
    t = time.perf_counter()
    info = _corpus_info(corpus_path)
    seed = _check_output(out, corpus_path, info.fingerprint, overwrite)
    path = staging_dir(out)
    _check_stage(path, info.fingerprint, overwrite)
    parsed = None if _has_docs(path, info.fingerprint) or seed else _read_corpus(corpus_path)
    out.parent.mkdir(parents=True, exist_ok=True)  # only once the inputs are known good
    created = _make_stage(path, out if seed else None, parsed, info)
    if state is not None and world > 1:
        state.wait_for_everyone()
    manifest, docs = Manifest.load(path), Corpus.load(path / "docs.arrow")
    stage = _Stage(out, path, created, manifest, docs, rank, world, state)
    stage.times["corpus"] = time.perf_counter() - t
    return stage


def _build_bm25(stage: _Stage, bm25_info: BM25Info | None) -> None:
    t = time.perf_counter()
    binfo = (bm25_info or BM25Info()).model_copy(update={"versions": library_versions(BM25_LIBRARIES)})
    shutil.rmtree(stage.path / "bm25", ignore_errors=True)  # may be hard links shared with `out`
    BM25Retriever.build(stage.docs, binfo, show_progress=True).save(stage.path / "bm25")
    stage.manifest.bm25 = binfo
    stage.times["bm25"] = time.perf_counter() - t


def _build_dense(
    stage: _Stage,
    cfg: EncoderConfig,
    index_type: str,
    index_params: dict[str, Any] | None,
    batch_size: int,
    shard_size: int,
    machines: tuple[int, int],
    main: bool,
) -> tuple[int, int, bool]:
    """Embed this worker's shards, then (on the one machine of a single-machine build) merge them.

    Returns (shards embedded, shards skipped as done, whether the dense part is complete).
    """
    num_shards, shard_index = machines
    t = time.perf_counter()
    enc, meta = _load_encoder(stage, cfg, index_type, shard_size)
    dense_dir = stage.path / "dense"
    worker = (shard_index * stage.world + stage.rank, stage.world * num_shards)
    embedded, skipped = embed_shards(stage.docs, enc, dense_dir / "shards", shard_size, batch_size, worker)
    stage.times["embed"] = time.perf_counter() - t
    stage.wait_for_everyone()
    complete = num_shards == 1
    if complete and stage.rank == 0:
        t = time.perf_counter()
        _merge_shards(dense_dir, len(stage.docs), shard_size, index_type, index_params, meta)
        stage.manifest.dense = meta
        stage.times["faiss"] = time.perf_counter() - t
    elif main:
        stage.manifest.dense = meta  # records the encoder so other machines' shards are checked
    return embedded, skipped, complete


def _load_encoder(
    stage: _Stage, cfg: EncoderConfig, index_type: str, shard_size: int
) -> tuple[Encoder, DenseInfo]:
    """The encoder, refused (and a fresh stage removed) when it cannot load or differs from the shards'."""
    try:
        enc = Encoder(cfg)
    except EncoderLoadError as exc:
        stage.abandon()
        raise IndexBuildError(f"--dense {exc}") from exc
    meta = _dense_info(cfg, enc, index_type, shard_size)
    try:
        _check_resume(stage.manifest.dense, meta, stage.out)
    except IndexMismatchError:
        stage.abandon()
        raise
    return enc, meta


def _merge_shards(
    dense_dir: Path,
    n_docs: int,
    shard_size: int,
    index_type: str,
    index_params: dict[str, Any] | None,
    meta: DenseInfo,
) -> None:
    """Write the FAISS index over every shard; records its parameters and size in `meta`."""
    import faiss

    emb = load_shards(dense_dir / "shards", n_docs, shard_size)
    index, used = make_faiss_index(emb, index_type, **(index_params or {}))
    apply_search_params(index, index_type, used)
    faiss.write_index(index, str(dense_dir / "index.faiss.tmp"))
    (dense_dir / "index.faiss.tmp").replace(dense_dir / "index.faiss")
    meta.index_params, meta.num_vectors = used, index.ntotal


def _finish(stage: _Stage, parts: list[str], complete: bool) -> None:
    """Record what was built; a complete index then replaces `out` in one rename."""
    stage.manifest.versions = library_versions()
    stage.manifest.kinds = sorted({*stage.manifest.kinds, *parts})
    stage.manifest.save(stage.path)
    if complete:
        _swap_into_place(stage.path, stage.out)


def _check_options(index_type: str, bm25: bool, dense: str | None, num_shards: int, shard_index: int) -> None:
    if index_type not in INDEX_TYPES:
        raise IndexBuildError(f"--index_type {index_type!r}: expected one of {', '.join(INDEX_TYPES)}")
    if not bm25 and not dense:
        raise IndexBuildError("nothing to build: pass --bm25 and/or --dense MODEL")
    if not 0 <= shard_index < num_shards:
        raise IndexBuildError(f"--shard_index {shard_index}: expected 0..{num_shards - 1} (--num_shards)")
    if dense:
        try:
            check_model_name(dense)
        except EncoderLoadError as exc:
            raise IndexBuildError(f"--dense {exc}") from exc


def _corpus_info(path: Path) -> CorpusInfo:
    """Names the corpus by its bytes; a missing file fails here, before anything is written."""
    if not path.is_file():
        problem = "is a directory" if path.is_dir() else "not found"
        raise CorpusFormatError(path, None, None, f"{problem}: pass a JSONL or parquet corpus file")
    return CorpusInfo(
        path=str(path.resolve()),
        size_bytes=path.stat().st_size,
        fingerprint=file_fingerprint(path),
        num_docs=0,
    )


def _read_corpus(path: Path) -> Corpus:
    """Parse and check the whole corpus (bad rows, bad bytes, duplicate ids, no rows at all)."""
    docs = Corpus.from_file(path)
    if len(docs) == 0:
        raise CorpusFormatError(path, None, None, "holds no passages: give a corpus with at least one row")
    return docs


def _complete_index(directory: Path) -> Manifest | None:
    """The manifest of a finished index in `directory`, or None when it holds none (or a broken one)."""
    if not (directory / "docs.arrow").is_file():
        return None
    try:
        return Manifest.load(directory)
    except (OSError, ValueError):
        return None


def _has_docs(directory: Path, fingerprint: str) -> bool:
    found = _complete_index(directory)
    return found is not None and found.corpus.fingerprint == fingerprint


def _check_output(out: Path, corpus: Path, fingerprint: str, overwrite: bool) -> bool:
    """Refuse to touch an `out` that is not ours to change; True when it is an index to extend."""
    if out.exists() and not out.is_dir():
        raise IndexBuildError(f"{out}: exists and is not a directory: choose another --output")
    check_output_dir(out.parent, "--output")
    if not out.exists() or not any(out.iterdir()):
        return False
    found = _complete_index(out)
    if found is not None and found.corpus.fingerprint == fingerprint:
        return True
    if overwrite:
        if corpus.resolve().is_relative_to(out.resolve()):
            raise IndexBuildError(f"{out}: --overwrite would delete the corpus {corpus} inside it")
        return False
    what = (
        f"holds an index of another corpus ({found.corpus.path}, fingerprint {found.corpus.fingerprint})"
        if found is not None
        else "is not empty and holds no complete index (no manifest.json or docs.arrow)"
    )
    raise IndexBuildError(f"{out}: {what}: choose another --output, or pass --overwrite to replace it")


def _check_stage(stage: Path, fingerprint: str, overwrite: bool) -> None:
    """An unfinished build of another corpus is discarded only when asked: it may hold hours of work."""
    if not stage.exists() or _has_docs(stage, fingerprint):
        return
    if overwrite:
        shutil.rmtree(stage)
        return
    raise IndexBuildError(
        f"{stage}: holds an unfinished build of another corpus: remove it, or pass --overwrite to discard it"
    )


def _make_stage(stage: Path, seed: Path | None, docs: Corpus | None, info: CorpusInfo) -> bool:
    """Create `stage` (from hard links to the index being extended, or from the parsed corpus).

    It is filled under a private name and renamed, so concurrent workers see it whole or not at all.
    Returns whether this call created it.
    """
    if stage.exists():
        return False
    tmp = Path(tempfile.mkdtemp(prefix=f"{stage.name}.", dir=stage.parent))
    try:
        if seed is not None:
            shutil.copytree(seed, tmp, copy_function=_link_or_copy, dirs_exist_ok=True)
        else:
            assert docs is not None
            docs.save(tmp / "docs.arrow")
            Manifest(corpus=info.model_copy(update={"num_docs": len(docs)})).save(tmp)
        tmp.rename(stage)
    except OSError:
        if not stage.exists():
            raise
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def _link_or_copy(src: str, dst: str) -> None:
    """Hard links cost no space; every later write in the stage replaces a file, never edits one."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _swap_into_place(stage: Path, out: Path) -> None:
    """Replace `out` by the finished `stage` with renames, so readers never see a half-written index."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        stage.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    old.rmdir()
    out.rename(old)
    stage.rename(out)
    shutil.rmtree(old)


def _dense_info(cfg: EncoderConfig, enc: Encoder, index_type: str, shard_size: int) -> DenseInfo:
    loaded = {f: getattr(enc, f) for f in ENCODER_FIELDS}
    return DenseInfo(
        model=cfg.model,
        max_length=cfg.max_length,
        index_type=index_type,
        shard_size=shard_size,
        versions=library_versions(DENSE_LIBRARIES),
        **loaded,
    )


ENCODER_FIELDS = ("model_path", "backend", "pooling", "query_prefix", "passage_prefix", "dim", "full_dim")
"""What a dense index records of the encoder as loaded (so a query is encoded the same way)."""


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
