"""Per-episode costs in each collection mode, and what the driver spends per episode, for docs/scale.md.

    python bench/scale_inputs.py            # 40 synthetic questions per mode, 200 ms per model call

Collects the synthetic world (`scripted_models(world, noise=0.15, teacher_extra_search_rate=0.22)`,
every model call delayed by `--latency-ms`) in each collection x outcome mode with the ordinary
`collect()`, then reads the episode files back: model calls and tokens per episode from the
per-role usage, seconds per episode from the call records (last call end - first call start).
Tokens are the scripted doubles' estimates (about 4 characters per token over the real prompt
and reply texts), not a model tokenizer's.

Then times what the Ray driver does per finished episode on this machine: append its line to
the store (one write + fsync per batch of 64) and merge its statistics. Prints markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from executor_sft.rollout import CollectConfig, collect
from executor_sft.rollout.summary import CollectionStats, collection_stats
from executor_sft.schema import Episode
from executor_sft.store import EpisodeStore, read_episodes
from executor_sft.synthetic import load_world, write_world

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support
from tests.support.ray_cluster import world_models, world_retriever  # noqa: E402

MODES = [
    ("shadow", "substitute"),
    ("shadow", "replay"),
    ("separate", "substitute"),
    ("separate", "replay"),
]
SCRIPT = {"noise": 0.15, "teacher_extra_search_rate": 0.22}


def _calls(record: Any, out: list[tuple[float, float]]) -> None:
    if isinstance(record, dict):
        if "t_start" in record and "latency_s" in record and record["t_start"]:
            out.append((float(record["t_start"]), float(record["latency_s"])))
        for value in record.values():
            _calls(value, out)
    elif isinstance(record, list):
        for value in record:
            _calls(value, out)


def measure_mode(
    world_dir: Path, out: Path, mode: str, outcome: str, questions: int, latency_s: float
) -> dict:
    config = CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": questions},
            "retriever": {"index": "unused-a-retriever-is-passed"},
            "output_dir": str(out),
            "concurrency": questions,
            "collection": {"mode": mode},
            "pipeline": {"outcome": {"mode": outcome}},
        }
    )
    models = world_models(str(world_dir), delay_s=latency_s, **SCRIPT)
    asyncio.run(
        collect(config, models=models, retriever=world_retriever(str(world_dir)), show_progress=False)
    )
    episodes = list(read_episodes(config.rollouts_path))
    per_question: dict[str, dict[str, float]] = {}
    seconds = []
    for record in episodes:
        q = per_question.setdefault(record["question"]["id"], {"calls": 0, "tokens": 0, "exec_tokens": 0})
        for role, usage in record["usage"].items():
            tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
            q["calls"] += usage.get("calls", 0)
            q["tokens"] += tokens
            if role in ("teacher", "student", "teacher_budget1", "executor_replay"):
                q["exec_tokens"] += tokens
        calls: list[tuple[float, float]] = []
        _calls(record, calls)
        if calls:
            seconds.append(max(t + lat for t, lat in calls) - min(t for t, _ in calls))
    n = len(per_question)
    return {
        "mode": f"{mode} + {outcome}",
        "episodes_per_question": len(episodes) / n,
        "calls": sum(q["calls"] for q in per_question.values()) / n,
        "tokens": sum(q["tokens"] for q in per_question.values()) / n,
        "exec_tokens": sum(q["exec_tokens"] for q in per_question.values()) / n,
        "seconds_median": statistics.median(seconds),
        "seconds_max": max(seconds),
        "line_bytes": config.rollouts_path.stat().st_size / len(episodes),
    }


def driver_cost(rollouts: Path, tmp: Path, episodes: int = 2048, batch: int = 64) -> dict:
    """Seconds of this process per episode for what the Ray driver does with one: store + stats."""
    lines = rollouts.read_bytes().splitlines(keepends=True)
    parsed = [Episode.model_validate(r) for r in read_episodes(rollouts)]
    digests = [collection_stats([e]) for e in parsed]
    stats = CollectionStats()
    with EpisodeStore(tmp / "driver.jsonl") as store:
        t0, cpu0 = time.perf_counter(), time.process_time()
        for start in range(0, episodes, batch):
            blob = b"".join(lines[i % len(lines)] for i in range(start, start + batch))
            store.append_lines(blob, {f"e{i}" for i in range(start, start + batch)})
            for i in range(start, start + batch):
                stats.merge(digests[i % len(digests)])
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"episodes": episodes, "wall_ms": 1000 * wall / episodes, "cpu_ms": 1000 * cpu / episodes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="scale-inputs-") as tmp:
        root = Path(tmp)
        write_world(root / "world", 0, 300, 50)
        load_world(root / "world")
        rows = [
            measure_mode(root / "world", root / f"{m}-{o}", m, o, args.questions, args.latency_ms / 1000)
            for m, o in MODES
        ]
        driver = driver_cost(root / "shadow-substitute" / "rollouts.jsonl", root)
    print(f"{args.questions} synthetic questions per mode, {args.latency_ms:g} ms per model call\n")
    print(
        "| mode | episodes/question | model calls/question | tokens/question | executor tokens/question "
        "| s/episode (median) | s/episode (max) | bytes/episode |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['episodes_per_question']:.0f} | {r['calls']:.1f} | {r['tokens']:,.0f} "
            f"| {r['exec_tokens']:,.0f} | {r['seconds_median']:.2f} | {r['seconds_max']:.2f} "
            f"| {r['line_bytes']:,.0f} |"
        )
    print(
        f"\ndriver per episode (store line + fsync per {64}, stats merge; {driver['episodes']} episodes): "
        f"{driver['wall_ms']:.3f} ms wall, {driver['cpu_ms']:.3f} ms CPU"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
