"""Build a retrieval index directory (BM25 and/or dense FAISS) from a corpus file.

python recipes/build_index.py --corpus corpus.jsonl --output indexes/wiki --bm25
python recipes/build_index.py --corpus corpus.jsonl --output indexes/wiki --dense minilm --index_type hnsw
accelerate launch recipes/build_index.py --corpus ... --output ... --dense MODEL   # shards across GPUs
python recipes/build_index.py ... --dense MODEL --num_shards 4 --shard_index 2     # one machine of 4

A bad corpus or output location ends with one line, `error: <file>[:<line>]: <what to do>`, and
exit status 2, before any encoder loads; the output directory is left as it was. The last line
names the retriever kinds the finished index serves (recipes/serve_retriever.py --kind).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from executor_sft.configfile import parse_trl_args
from executor_sft.recipe_main import run_recipe
from executor_sft.retrieval.build import build_index
from executor_sft.retrieval.encoders import EncoderConfig
from executor_sft.retrieval.kinds import RETRIEVERS, kinds_served


def _used_by(part: str) -> str:
    """The help text's list of the registered retriever kinds that read index part `part`."""
    return ", ".join(name for name in RETRIEVERS.names() if part in RETRIEVERS.get(name).needs)


@dataclass
class BuildIndexArgs:
    corpus: str = field(metadata={"help": "corpus JSONL/parquet: {id, contents} or {id, title, text}"})
    output: str = field(metadata={"help": "index directory to create, resume, or add a kind to"})
    overwrite: bool = field(
        default=False,
        metadata={"help": "replace a non-empty --output that is not an index of this corpus"},
    )
    bm25: bool = field(
        default=False, metadata={"help": f"build a bm25s index (read by kinds {_used_by('bm25')})"}
    )
    dense: str | None = field(
        default=None,
        metadata={"help": f"encoder path/name or alias (minilm) to embed with (kinds {_used_by('dense')})"},
    )
    index_type: str = field(default="flat", metadata={"help": "flat | hnsw | ivfpq"})
    backend: str = field(default="auto", metadata={"help": "sentence-transformers | transformers | auto"})
    pooling: str = field(default="mean", metadata={"help": "transformers backend: mean | cls | last"})
    preset: str | None = field(default=None, metadata={"help": "prefix preset: none | e5 | bge | qwen3"})
    query_prefix: str | None = None
    passage_prefix: str | None = None
    dim: int | None = field(default=None, metadata={"help": "Matryoshka truncation"})
    max_length: int = 512
    batch_size: int = 64
    shard_size: int = field(default=4096, metadata={"help": "passages per embedding shard (resume unit)"})
    num_shards: int = field(default=1, metadata={"help": "machines sharing the embedding work"})
    shard_index: int = field(default=0, metadata={"help": "this machine's index in 0..num_shards-1"})
    hnsw_m: int = 32
    ef_search: int = 128
    nlist: int | None = None
    nprobe: int = 32


def main(args: BuildIndexArgs) -> None:
    encoder = None
    if args.dense:
        encoder = EncoderConfig(
            model=args.dense,
            backend=args.backend,
            pooling=args.pooling,
            preset=args.preset,
            query_prefix=args.query_prefix,
            passage_prefix=args.passage_prefix,
            dim=args.dim,
            max_length=args.max_length,
        )
    params = {"hnsw_m": args.hnsw_m, "ef_search": args.ef_search, "nlist": args.nlist, "nprobe": args.nprobe}
    result = build_index(
        args.corpus,
        args.output,
        bm25=args.bm25,
        dense=args.dense,
        index_type=args.index_type,
        encoder=encoder,
        batch_size=args.batch_size,
        shard_size=args.shard_size,
        num_shards=args.num_shards,
        shard_index=args.shard_index,
        index_params=params,
        overwrite=args.overwrite,
    )
    print(result.summary())
    if result.complete:
        print(f"retriever kinds it serves: {', '.join(kinds_served(result.kinds))}")


if __name__ == "__main__":
    (parsed,) = parse_trl_args((BuildIndexArgs,), None, description=__doc__)
    run_recipe(main, parsed)
