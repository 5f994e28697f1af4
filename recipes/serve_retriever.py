"""Serve an index over HTTP in the Search-R1 wire format (POST /retrieve, GET /health).

python recipes/serve_retriever.py --index indexes/wiki --kind bm25 --port 8000
python recipes/serve_retriever.py --index indexes/wiki --kind hybrid --host 0.0.0.0   # reachable from other hosts
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from executor_sft.retrieval.config import load_retriever
from executor_sft.retrieval.server import ServerConfig, create_app


@dataclass
class ServeArgs:
    index: str = field(metadata={"help": "index directory built by recipes/build_index.py"})
    kind: str = field(default="bm25", metadata={"help": "bm25 | rank_bm25 | dense | hybrid | rrf"})
    host: str = field(default="127.0.0.1", metadata={"help": "bind address (127.0.0.1 unless told)"})
    port: int = 8000
    corpus: str | None = field(default=None, metadata={"help": "check the index was built from this file"})
    options: str = field(default="{}", metadata={"help": "JSON of extra load_retriever options"})
    batching: bool = field(default=True, metadata={"help": "micro-batch concurrent requests"})
    max_batch: int = 128
    max_wait_ms: float = 2.0
    max_queries: int = 256
    max_k: int = 100
    max_query_chars: int = field(default=4096, metadata={"help": "longest query accepted (422 above)"})
    max_body_bytes: int = field(
        default=4 << 20, metadata={"help": "largest request body accepted (413 above)"}
    )
    access_log: bool = field(
        default=False,
        metadata={"help": "log every request (off: at thousands of requests/s the log line costs CPU)"},
    )


def main(args: ServeArgs) -> None:
    import uvicorn

    opts = json.loads(args.options)
    if args.corpus:
        opts["corpus"] = args.corpus
    retriever = load_retriever(args.index, args.kind, **opts)
    config = ServerConfig(
        batching=args.batching,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        max_queries=args.max_queries,
        max_k=args.max_k,
        max_query_chars=args.max_query_chars,
        max_body_bytes=args.max_body_bytes,
    )
    uvicorn.run(
        create_app(retriever, config, kind=args.kind),
        host=args.host,
        port=args.port,
        log_level="info",
        access_log=args.access_log,
    )


if __name__ == "__main__":
    (parsed,) = HfArgumentParser(ServeArgs).parse_args_into_dataclasses()
    main(parsed)
