"""Serve an index over HTTP in the Search-R1 wire format (POST /retrieve, GET /health).

python recipes/serve_retriever.py --index indexes/wiki --kind bm25 --port 8000
python recipes/serve_retriever.py --index indexes/wiki --kind hybrid --host 0.0.0.0   # reachable from other hosts
python recipes/serve_retriever.py --index indexes/wiki --kind mykinds:one_per_title     # a kind of your own

A missing or mismatched index, an unknown kind, or bad --options ends with one line
(`error: ...`) and exit status 2, before any encoder loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from executor_sft.configfile import parse_trl_args
from executor_sft.errors import ConfigError
from executor_sft.recipe_main import run_recipe
from executor_sft.retrieval.config import load_retriever
from executor_sft.retrieval.kinds import RETRIEVERS
from executor_sft.retrieval.server import ServerConfig, create_app


@dataclass
class ServeArgs:
    index: str = field(metadata={"help": "index directory built by recipes/build_index.py"})
    kind: str = field(
        default="bm25",
        metadata={"help": f"{' | '.join(RETRIEVERS.names())}, or your own kind as package.module:attr"},
    )
    host: str = field(default="127.0.0.1", metadata={"help": "bind address (127.0.0.1 unless told)"})
    port: int = 8000
    corpus: str | None = field(default=None, metadata={"help": "check the index was built from this file"})
    options: str = field(default="{}", metadata={"help": "JSON of extra load_retriever options"})
    batching: bool = field(default=True, metadata={"help": "micro-batch concurrent requests"})
    max_batch: int = field(default=ServerConfig.max_batch, metadata={"help": "queries per retriever call"})
    max_wait_ms: float = ServerConfig.max_wait_ms
    max_queries: int = field(
        default=ServerConfig.max_queries, metadata={"help": "queries per request (422 above)"}
    )
    max_k: int = ServerConfig.max_k
    default_k: int = field(
        default=ServerConfig.default_k, metadata={"help": "passages for a null or absent topk"}
    )
    max_query_chars: int = field(
        default=ServerConfig.max_query_chars, metadata={"help": "longest query accepted (422 above)"}
    )
    max_body_bytes: int = field(
        default=ServerConfig.max_body_bytes, metadata={"help": "largest request body accepted (413 above)"}
    )
    access_log: bool = field(
        default=False,
        metadata={"help": "log every request (off: at thousands of requests/s the log line costs CPU)"},
    )


def parse_options(text: str) -> dict[str, Any]:
    try:
        opts = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--options: not JSON ({e.msg} at character {e.pos + 1})") from e
    if not isinstance(opts, dict):
        raise ConfigError("--options: expected a JSON object such as '{\"ef_search\": 64}'")
    return opts


def main(args: ServeArgs) -> None:
    import uvicorn

    opts = parse_options(args.options)
    if args.corpus:
        opts["corpus"] = args.corpus
    retriever = load_retriever(args.index, args.kind, **opts)
    config = ServerConfig(
        batching=args.batching,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        max_queries=args.max_queries,
        max_k=args.max_k,
        default_k=args.default_k,
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
    (parsed,) = parse_trl_args((ServeArgs,), None, description=__doc__)
    run_recipe(main, parsed)
