"""Retrieval benchmark on minibench: recall@k per method, bm25s vs rank-bm25 speed, server throughput.

    python bench/retrieval_bench.py                       # full corpus (embeds 19,982 passages once, cached)
    python bench/retrieval_bench.py --dense_docs 1500     # dense parts on gold + sampled distractors only
    python bench/retrieval_bench.py --out bench/results/retrieval.md

Recall@k = fraction of a query's gold passages (positive_doc_ids) in its top k, averaged.
Queries: minibench dev questions; and MuSiQue dev `decomposition` sub-questions, where `#j`
is replaced by hop j's answer and hop i's gold passage is positive_doc_ids[i].
Indexes are cached under ~/.cache/executor_sft/bench (outside the repo) and reused.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from transformers import HfArgumentParser

from executor_sft.retrieval import Manifest, build_index, load_retriever
from executor_sft.retrieval.bm25 import RankBM25Retriever
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.encoders import EncoderConfig
from executor_sft.testing import cache_dir, minibench_corpus, minibench_questions

REPO = Path(__file__).resolve().parents[1]
KS = (1, 3, 5, 10)


@dataclass
class BenchArgs:
    cache: str = str(cache_dir() / "bench")
    dense_docs: int | None = None  # None: the whole corpus; else gold passages + distractors up to N
    max_length: int = 256
    speed_queries: int = 200
    server_requests: int = 512  # per setting (128 with one client)
    skip_server: bool = False
    skip_dense: bool = False  # BM25 rows and the BM25 speed ratio only
    out: str | None = None


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sub_questions(questions: list[dict]) -> list[tuple[str, list[str]]]:
    """MuSiQue decompositions with `#j` replaced by hop j's answer; hop i's gold is positive_doc_ids[i]."""
    out = []
    for q in questions:
        steps = q.get("decomposition") or []
        if len(steps) != len(q["positive_doc_ids"]):
            continue
        answers = [s["answer"] for s in steps]
        for i, step in enumerate(steps):
            text = re.sub(r"#(\d+)", lambda m, a=answers: a[int(m.group(1)) - 1], step["question"])
            out.append((text, [q["positive_doc_ids"][i]]))
    return out


def recall(retriever, queries: list[tuple[str, list[str]]], batch: int = 64) -> dict[int, float]:
    found = {k: [] for k in KS}
    for i in range(0, len(queries), batch):
        chunk = queries[i : i + batch]
        results = retriever.search([q for q, _ in chunk], max(KS))
        for (_, gold), hits in zip(chunk, results, strict=True):
            ids = [h.doc_id for h in hits]
            for k in KS:
                found[k].append(len(set(ids[:k]) & set(gold)) / len(gold))
    return {k: float(np.mean(v)) for k, v in found.items()}


def subset_corpus(rows: list[dict], questions: list[dict], n: int, path: Path) -> Path:
    gold = {d for q in questions for d in q["positive_doc_ids"]}
    rng = random.Random(0)
    others = [r for r in rows if r["id"] not in gold]
    keep = [r for r in rows if r["id"] in gold] + rng.sample(others, max(0, n - len(gold)))
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with path.open("w", encoding="utf-8") as f:
            for r in keep:
                f.write(json.dumps({"id": r["id"], "title": r["title"], "text": r["text"]}) + "\n")
    return path


def ensure_index(corpus: Path, out: Path, max_length: int, dense: bool = True) -> Path:
    want = {"bm25", "dense"} if dense else {"bm25"}
    if (out / "manifest.json").exists() and want <= set(Manifest.load(out).kinds):
        return out
    t = time.perf_counter()
    enc = EncoderConfig(max_length=max_length)
    res = build_index(corpus, out, bm25=True, dense="minilm" if dense else None, encoder=enc, shard_size=1024)
    print(f"built {out} in {time.perf_counter() - t:.0f}s: {res.summary()}", flush=True)
    return out


def speed(index: Path, questions: list[dict], n: int) -> tuple[float, float]:
    qs = [q["question"] for q in questions[:n]]
    fast = load_retriever(index, "bm25")
    fast.search(qs[:4], 10)
    t = time.perf_counter()
    fast.search(qs, 10)
    fast_qps = len(qs) / (time.perf_counter() - t)
    slow = RankBM25Retriever(Corpus.load(index / "docs.arrow"))
    sample = qs[: max(10, n // 10)]
    t = time.perf_counter()
    slow.search(sample, 10)
    slow_qps = len(sample) / (time.perf_counter() - t)
    return fast_qps, slow_qps


def start_server(index: Path, port: int, batching: bool, cmd: list[str] | None = None) -> subprocess.Popen:
    cmd = cmd or [sys.executable, str(REPO / "recipes" / "serve_retriever.py"), "--index", str(index),
                  "--kind", "dense", "--port", str(port), "--batching", str(batching)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"retrieval server exited with {proc.returncode}: {' '.join(cmd)}"
                ) from None
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("retrieval server did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to show where the cycles go."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _raw_load(port: int, bodies: list[bytes], clients: int, total: int) -> tuple[float, int]:
    """`clients` keep-alive HTTP/1.1 connections, each sending its next request when the last is answered.

    Raw asyncio streams instead of httpx: the load generator must cost the machine far less than
    the server it measures (httpx spends milliseconds of CPU per request).
    """
    counter = iter(range(total))
    errors = 0

    async def one(i: int | None = None) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for j in counter if i is None else (i,):
                body = bodies[j % len(bodies)]
                writer.write(
                    b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
                )
                status = int((await reader.readline()).split()[1])
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                errors += status != 200
        finally:
            writer.close()

    await one(0)  # warm up
    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    return total / (time.perf_counter() - t), errors


def load_test(port: int, queries: list[str], clients: int, total: int) -> tuple[float, int, float]:
    """Requests/s, errors and this process's CPU seconds per request (run it in its own process)."""
    bodies = [json.dumps({"queries": [q], "topk": 3}).encode() for q in queries]
    cpu = time.process_time()
    qps, errors = asyncio.run(_raw_load(port, bodies, clients, total))
    return qps, errors, (time.process_time() - cpu) / total


@dataclass
class ServerRow:
    clients: int
    batching: bool
    qps: float
    errors: int
    server_cpu_ms: float  # server CPU per request
    client_cpu_ms: float  # load generator CPU per request


def server_bench(
    index: Path, queries: list[str], total: int, server_cmd=None, clients_list=(1, 16, 64)
) -> list[ServerRow]:
    """Throughput of a dense server with batching on and off; the load runs in a separate process."""
    rows = []
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        for batching in (True, False):
            port = 18000 + random.randint(0, 999)
            proc = start_server(
                index, port, batching, server_cmd(index, port, batching) if server_cmd else None
            )
            try:
                for clients in clients_list:
                    n = total if clients > 1 else max(16, total // 4)
                    cpu = cpu_seconds(proc.pid)
                    qps, errors, client_cpu = pool.submit(load_test, port, queries, clients, n).result()
                    row = ServerRow(
                        clients,
                        batching,
                        qps,
                        errors,
                        (cpu_seconds(proc.pid) - cpu) / n * 1e3,
                        client_cpu * 1e3,
                    )
                    rows.append(row)
                    print(
                        f"server clients={clients} batching={batching}: {qps:.1f} req/s, errors={errors}, "
                        f"CPU/request server {row.server_cpu_ms:.1f} ms, load generator {row.client_cpu_ms:.2f} ms",
                        flush=True,
                    )
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    return rows


def main(args: BenchArgs) -> str:
    rows = read_jsonl(minibench_corpus())
    questions = read_jsonl(minibench_questions())
    dev = [q for q in questions if q["split"] == "dev"]
    cache = Path(args.cache)
    if args.dense_docs:
        corpus = subset_corpus(rows, dev, args.dense_docs, cache / f"minibench_subset{args.dense_docs}.jsonl")
        index = ensure_index(
            corpus, cache / f"minibench_subset{args.dense_docs}_minilm", args.max_length, not args.skip_dense
        )
    else:
        corpus = minibench_corpus()
        index = ensure_index(corpus, cache / "minibench_minilm", args.max_length, not args.skip_dense)
    n_docs = Manifest.load(index).corpus.num_docs
    query_sets = {
        "dev questions": [(q["question"], q["positive_doc_ids"]) for q in dev],
        "MuSiQue dev sub-questions": sub_questions([q for q in dev if q["dataset"] == "musique"]),
    }
    retrievers = {"BM25 (bm25s, stemmed)": load_retriever(index, "bm25")}
    if not args.skip_dense:
        retrievers["dense (MiniLM, flat)"] = load_retriever(index, "dense")
        retrievers["hybrid (0.6 dense / 0.4 BM25, theoretical min-max)"] = load_retriever(index, "hybrid")
        retrievers["hybrid (0.6 dense / 0.4 BM25, per-list min-max)"] = load_retriever(
            index, "hybrid", normalization="minmax"
        )
        retrievers["RRF (k=60)"] = load_retriever(index, "rrf")
    lines = [
        f"Corpus: {n_docs} passages ({'whole minibench corpus' if not args.dense_docs else 'all dev gold passages + sampled distractors'}); "
        f"encoder MiniLM-L6 max_length {args.max_length}.",
        "",
        "| queries | method | R@1 | R@3 | R@5 | R@10 |",
        "|---|---|---|---|---|---|",
    ]
    for qname, qs in query_sets.items():
        for name, r in retrievers.items():
            t = time.perf_counter()
            rec = recall(r, qs)
            print(f"{qname} / {name}: {rec} ({time.perf_counter() - t:.0f}s)", flush=True)
            lines.append(
                f"| {qname} (n={len(qs)}) | {name} | " + " | ".join(f"{rec[k]:.3f}" for k in KS) + " |"
            )
    fast_qps, slow_qps = speed(index, dev, args.speed_queries)
    lines += ["", "| BM25 backend | queries/s (k=10) |", "|---|---|",
              f"| bm25s | {fast_qps:.1f} |", f"| rank-bm25 | {slow_qps:.2f} |",
              f"| ratio | {fast_qps / slow_qps:.0f}x |"]  # fmt: skip
    if not args.skip_server and not args.skip_dense:
        srows = server_bench(index, [q["question"] for q in dev], args.server_requests)
        lines += ["", "| server (dense) clients | batching | requests/s | errors | server CPU ms/request | "
                  "load generator CPU ms/request |", "|---|---|---|---|---|---|"]  # fmt: skip
        lines += [
            f"| {r.clients} | {'on' if r.batching else 'off'} | {r.qps:.1f} | {r.errors} | "
            f"{r.server_cpu_ms:.1f} | {r.client_cpu_ms:.2f} |"
            for r in srows
        ]
        on = {r.clients: r.qps for r in srows if r.batching}
        off = {r.clients: r.qps for r in srows if not r.batching}
        lines.append(f"| 64 | on/off ratio | {on[64] / off[64]:.1f}x | | | |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        cmd = "python bench/retrieval_bench.py " + " ".join(sys.argv[1:])
        Path(args.out).write_text(
            f"# Retrieval benchmark\n\nCommand: `{cmd}` (machine: {os.cpu_count()} CPU cores, shared)\n\n{table}\n",
            encoding="utf-8",
        )
    return table


if __name__ == "__main__":
    (parsed,) = HfArgumentParser(BenchArgs).parse_args_into_dataclasses()
    main(parsed)
