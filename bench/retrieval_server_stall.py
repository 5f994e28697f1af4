"""Does one big `/retrieve` stall the retrieval server for everyone? (issue 55, "Stalls")

    python bench/retrieval_server_stall.py --index indexes/minibench --out bench/results/retrieval_server_stall.json

Starts `recipes/serve_retriever.py --kind bm25` as a subprocess, then, for one request and for
`--concurrent` requests at once of `--queries` x `--topk` (the server's limits: 4,096 x 100),
polls `GET /health` every `--poll_s` while they run. Reports each phase's wall time, the slowest
`/health`, and the server's RSS (Linux /proc) before, at its peak and `--settle_s` after.
Queries are minibench questions, numbered so that no two are the same.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from retrieval_bench import REPO, start_server
from transformers import HfArgumentParser

from executor_sft.retrieval.server import ServerConfig


@dataclass
class Args:
    index: str
    port: int = 8731
    queries: int = ServerConfig.max_queries
    topk: int = ServerConfig.max_k
    concurrent: int = 4
    poll_s: float = 0.05
    settle_s: float = 3.0
    questions: str = "../shared/minibench/questions.jsonl"
    out: str | None = None


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def phase(url: str, pid: int, bodies: list[dict], poll_s: float) -> dict:
    """Send `bodies` at once while polling /health; wall, slowest /health, peak RSS, statuses."""
    done = threading.Event()
    health: list[float] = []
    peak = [rss_mb(pid)]

    def poll() -> None:
        with httpx.Client(timeout=60) as client:
            while not done.is_set():
                t = time.perf_counter()
                client.get(f"{url}/health").raise_for_status()
                health.append(time.perf_counter() - t)
                peak.append(rss_mb(pid))
                time.sleep(poll_s)

    def send(body: dict) -> int:
        r = httpx.post(f"{url}/retrieve", json=body, timeout=600)
        return r.status_code

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as pool:
        statuses = list(pool.map(send, bodies))
    wall = time.perf_counter() - start
    done.set()
    poller.join(timeout=60)
    return {
        "requests": len(bodies),
        "statuses": statuses,
        "wall_s": round(wall, 2),
        "health_polls": len(health),
        "health_max_s": round(max(health), 3),
        "rss_peak_mb": round(max(peak), 1),
    }


def main(args: Args) -> dict:
    texts = [json.loads(line)["question"] for line in Path(args.questions).read_text().splitlines() if line]
    queries = [f"{texts[i % len(texts)]} ({i})" for i in range(args.queries)]
    body = {"queries": queries, "topk": args.topk, "return_scores": True}
    cmd = [sys.executable, str(REPO / "recipes" / "serve_retriever.py"), "--index", args.index,
           "--kind", "bm25", "--port", str(args.port)]  # fmt: skip
    proc = start_server(Path(args.index), args.port, True, cmd)
    url = f"http://127.0.0.1:{args.port}"
    try:
        rss_start = rss_mb(proc.pid)
        one = phase(url, proc.pid, [body], args.poll_s)
        time.sleep(args.settle_s)
        one["rss_after_mb"] = round(rss_mb(proc.pid), 1)
        many = phase(url, proc.pid, [body] * args.concurrent, args.poll_s)
        time.sleep(args.settle_s)
        many["rss_after_mb"] = round(rss_mb(proc.pid), 1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result = {
        "command": " ".join(sys.argv),
        "settings": asdict(args),
        "rss_start_mb": round(rss_start, 1),
        "one": one,
        "concurrent": many,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    (parsed,) = HfArgumentParser(Args).parse_args_into_dataclasses()
    main(parsed)
