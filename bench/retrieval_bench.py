"""Retrieval benchmark on minibench: recall@k per method, bm25s vs rank-bm25 speed, server throughput;
and, with --stack, single-call quality and latency per search configuration, rerank stages included.

    python bench/retrieval_bench.py                       # full corpus (embeds 19,982 passages once, cached)
    python bench/retrieval_bench.py --dense_docs 1500     # dense parts on gold + sampled distractors only
    python bench/retrieval_bench.py --out bench/results/retrieval.md
    python bench/retrieval_bench.py --stack --out bench/results/retrieval.md   # the configurations table

--stack measures every configuration in `stack_configs` on the same dev questions in one run,
one query per call as an agent's search tool calls it: recall@5, nDCG@5 (gold passages gain 1,
`retrieval_metrics.py`), P50/P95 wall time per call and the size of the index parts
read. Its corpus is the questions' gold passages, BM25's top 30 for each question over the
whole corpus (hard distractors), and random passages up to --stack_docs; its section replaces
the same-titled section of --out and leaves the rest of the file as it is.

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
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
from transformers import HfArgumentParser

from executor_sft.cache import cache_dir
from executor_sft.retrieval import Manifest, build_index, load_retriever
from executor_sft.retrieval.bm25 import RankBM25Retriever
from executor_sft.retrieval.corpus import Corpus
from executor_sft.retrieval.encoders import EncoderConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support
from tests.support.paths import minibench_corpus, minibench_questions  # noqa: E402

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
    stack: bool = False  # only the per-configuration table (rerank stages included)
    stack_questions: int = 30  # dev questions, a third from each dataset
    stack_docs: int = 600
    stack_configs: str | None = None  # labels from STACK_CONFIGS separated by ";" (default: all)


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
    out.parent.mkdir(parents=True, exist_ok=True)
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


STACK_CONFIGS: dict[str, tuple[str, dict]] = {
    "BM25": ("bm25", {}),
    "dense (MiniLM)": ("dense", {}),
    "hybrid (0.6 dense / 0.4 BM25)": ("hybrid", {}),
    "BM25 + dense re-scorer (MiniLM, top 20)": ("dense_rescore", {"over": "bm25", "rerank": {"top_n": 20}}),
    "hybrid + dense re-scorer (MiniLM, top 20)": (
        "dense_rescore",
        {"over": "hybrid", "rerank": {"top_n": 20}},
    ),
    "hybrid + yes/no LLM (SmolLM2-135M, top 10)": (
        "llm_rerank",
        {
            "over": "hybrid",
            "rerank": {"model": "offline:smollm2", "top_n": 10, "batch_size": 10, "window": 256},
        },
    ),
}
"""label -> (kind, options). The offline equivalents of the blog's configurations, cut to what two
CPU cores rescore in minutes (recipes/configs/retrieval_minibench_*.yaml use deeper top-N)."""

STACK_TITLE = "## Search configurations: single-call quality and latency"
STACK_K = 5


def stack_questions(dev: list[dict], n: int) -> list[dict]:
    by_dataset: dict[str, list[dict]] = {}
    for q in dev:
        by_dataset.setdefault(q["dataset"], []).append(q)
    rng = random.Random(0)
    per = max(1, n // len(by_dataset))
    return [q for name in sorted(by_dataset) for q in rng.sample(by_dataset[name], per)]


def stack_corpus(rows: list[dict], questions: list[dict], n: int, bm25_index: Path, path: Path) -> Path:
    """Gold passages + BM25's top 30 per question (whole corpus) + random passages up to `n`."""
    if path.exists():
        return path
    bm25 = load_retriever(bm25_index, "bm25")
    keep = {d for q in questions for d in q["positive_doc_ids"]}
    for hits in bm25.search([q["question"] for q in questions], 30):
        keep |= {h.doc_id for h in hits}
    rng = random.Random(0)
    others = [r["id"] for r in rows if r["id"] not in keep]
    keep |= set(rng.sample(others, max(0, n - len(keep))))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            if r["id"] in keep:
                f.write(json.dumps({"id": r["id"], "title": r["title"], "text": r["text"]}) + "\n")
    return path


def _part_bytes(index: Path, kind: str, options: dict) -> int:
    parts = {"bm25": ["bm25"], "dense": ["dense"], "hybrid": ["dense", "bm25"], "rrf": ["dense", "bm25"]}
    below = options.get("over", kind)
    return sum(f.stat().st_size for p in parts[below] for f in (index / p).rglob("*") if f.is_file())


@dataclass
class StackRow:
    label: str
    recall: float
    ndcg: float
    p50_ms: float
    p95_ms: float
    index_mb: float
    load_s: float
    pre_recall: float | None = None
    """A rerank stage's recall of its candidates (the stage below, top `top_n`) before reranking,
    the search-agent blog's "pre-reranker recall"; None for a configuration without a rerank stage."""
    pre_n: int | None = None


def stack_row(label: str, index: Path, kind: str, options: dict, questions: list[dict]) -> StackRow:
    from bench.retrieval_metrics import ndcg_at_k, recall_at_k

    t = time.perf_counter()
    retriever = load_retriever(index, kind, **json.loads(json.dumps(options)))
    load_s = time.perf_counter() - t
    retriever.search([questions[0]["question"]], STACK_K)  # warm-up: lazy tensors, first-call allocations
    recalls, ndcgs, times = [], [], []
    for q in questions:
        t = time.perf_counter()
        (hits,) = retriever.search([q["question"]], STACK_K)
        times.append(time.perf_counter() - t)
        ids = [h.doc_id for h in hits]
        recalls.append(recall_at_k(ids, q["positive_doc_ids"], STACK_K))
        ndcgs.append(ndcg_at_k(ids, q["positive_doc_ids"], STACK_K))
    ms = np.asarray(times) * 1e3
    pre_recall, pre_n = _pre_rerank_recall(index, options, questions)
    row = StackRow(label, float(np.mean(recalls)), float(np.mean(ndcgs)), float(np.percentile(ms, 50)),
                   float(np.percentile(ms, 95)), _part_bytes(index, kind, options) / 1e6, load_s,
                   pre_recall, pre_n)  # fmt: skip
    print(f"{label}: R@5 {row.recall:.3f} nDCG@5 {row.ndcg:.3f} P50 {row.p50_ms:.1f} ms "
          f"P95 {row.p95_ms:.1f} ms (load {load_s:.0f}s)", flush=True)  # fmt: skip
    return row


def _pre_rerank_recall(index: Path, options: dict, questions: list[dict]) -> tuple[float | None, int | None]:
    """Recall@top_n of a rerank stage's candidates: the kind below it (`over`, with the options
    beside it) asked for `top_n` passages, as the stage asks it. (None, None) without a rerank stage."""
    from bench.retrieval_metrics import recall_at_k

    if "rerank" not in options:
        return None, None
    top_n = int(options["rerank"].get("top_n", 50))
    below = {k: v for k, v in options.items() if k not in ("over", "rerank")}
    retriever = load_retriever(index, options.get("over", "bm25"), **json.loads(json.dumps(below)))
    hits = retriever.search([q["question"] for q in questions], top_n)
    ids = [[h.doc_id for h in row] for row in hits]
    return float(
        np.mean([recall_at_k(i, q["positive_doc_ids"], top_n) for i, q in zip(ids, questions, strict=True)])
    ), top_n


def stack_plot(rows: list[StackRow], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 4.8), dpi=110)
    xs = [max(r.p50_ms, 1e-2) for r in rows]
    last_decade = max(xs) / 30
    placed: list[tuple[float, float, float]] = []  # (log10 x from, log10 x to, y) of labels so far
    for x, r in sorted(zip(xs, rows, strict=True), key=lambda p: p[0]):
        ax.scatter(x, r.ndcg, s=40, zorder=3)
        right = x > last_decade  # the slowest points' labels go to their left, inside the axes
        span = (np.log10(x) - 1.4, np.log10(x)) if right else (np.log10(x), np.log10(x) + 1.4)
        clash = any(a < span[1] and span[0] < b and abs(y - r.ndcg) < 0.025 for a, b, y in placed)
        placed.append((*span, r.ndcg))
        ax.annotate(r.label, (x, r.ndcg), textcoords="offset points", xytext=(-6 if right else 6, -11 if clash else 5),
                    ha="right" if right else "left", fontsize=7)  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("P50 ms per search call (log scale)")
    ax.set_ylabel("nDCG@5")
    ax.set_title("single-call quality vs latency (minibench sub-corpus, 2 CPU cores)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _load_note() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1/5/15 min) on {os.cpu_count()} cores"


def _pre(row: StackRow) -> str:
    return "-" if row.pre_recall is None else f"{row.pre_recall:.3f} (N={row.pre_n})"


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def stack_section(args: BenchArgs, rows: list[dict], dev: list[dict]) -> str:
    cache = Path(args.cache)
    questions = stack_questions(dev, args.stack_questions)
    bm25_whole = ensure_index(minibench_corpus(), cache / "minibench_bm25", args.max_length, dense=False)
    corpus = stack_corpus(rows, questions, args.stack_docs, bm25_whole,
                          cache / f"minibench_stack{args.stack_questions}q{args.stack_docs}.jsonl")  # fmt: skip
    index = ensure_index(corpus, cache / f"minibench_stack{args.stack_questions}q{args.stack_docs}_minilm",
                         args.max_length)  # fmt: skip
    n_docs = Manifest.load(index).corpus.num_docs
    wanted = args.stack_configs.split(";") if args.stack_configs else list(STACK_CONFIGS)
    load_before = _load_note()
    t = time.perf_counter()
    out = [stack_row(label, index, *STACK_CONFIGS[label], questions) for label in wanted]
    seconds = time.perf_counter() - t
    plot = stack_plot(
        out, Path(args.out).with_name("retrieval_configs.png") if args.out else cache / "stack.png"
    )
    plot.with_suffix(".json").write_text(
        json.dumps([asdict(r) for r in out], indent=2) + "\n", encoding="utf-8"
    )
    lines = [
        STACK_TITLE,
        "",
        f"Command: `python bench/retrieval_bench.py --stack --out bench/results/retrieval.md` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {seconds:.0f} s for the table). "
        f"Machine: {load_before} before the run, {_load_note()} after: other jobs shared the cores, "
        "so the times are slower and noisier than on an idle machine (their ratios are the point).",
        "",
        f"Questions: {len(questions)} minibench dev questions ({len(questions) // 3} per dataset), the same "
        f"for every row, one query per call. Corpus: {n_docs} passages (their gold passages, BM25's "
        "top 30 per question over the whole corpus, random passages); MiniLM-L6 max_length "
        f"{args.max_length}. nDCG@5 counts each gold passage with gain 1. Index MB: the index "
        "parts the configuration reads (a reranker adds its model, not index). Pre-rerank recall: "
        "a rerank stage's candidates (the stage below it, top N) before reranking, as the search-agent "
        "blog reports it; - without a rerank stage.",
        "",
        "| configuration | pre-rerank R@N | R@5 | nDCG@5 | P50 ms/call | P95 ms/call | index MB |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {r.label} | {_pre(r)} | {r.recall:.3f} | {r.ndcg:.3f} | {_ms(r.p50_ms)} | "
              f"{_ms(r.p95_ms)} | {r.index_mb:.1f} |" for r in out]  # fmt: skip
    lines += ["", f"Plot: `{plot.name}` (nDCG@5 against P50 per call; the rows in `{plot.stem}.json`).", ""]
    return "\n".join(lines)


def write_section(path: Path, title: str, section: str) -> None:
    """Put `section` first under the file's top heading, replacing a section with the same title."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Retrieval benchmark\n"
    head, sep, rest = text.partition("\n## ")
    rest = sep.lstrip("\n") + rest if sep else ""
    blocks = [b for b in ("\n" + rest).split("\n## ") if b.strip()]
    kept = ["## " + b.rstrip() + "\n" for b in blocks if not ("## " + b).startswith(title)]
    path.write_text(head.rstrip() + "\n\n" + section.rstrip() + "\n\n" + "\n".join(kept), encoding="utf-8")


def main(args: BenchArgs) -> str:
    rows = read_jsonl(minibench_corpus())
    questions = read_jsonl(minibench_questions())
    dev = [q for q in questions if q["split"] == "dev"]
    if args.stack:
        section = stack_section(args, rows, dev)
        print(section)
        if args.out:
            write_section(Path(args.out), STACK_TITLE, section)
        return section
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
