"""Demo over several seeds: is the trained student's gain well outside run-to-run noise?

    nohup python bench/demo_bench.py --seeds 0 1 2 > bench/demo_bench.log 2>&1 &

Runs `recipes/demo.py` (its config, default `recipes/configs/demo.yaml`) once per seed (world,
collection, training and evaluation all follow the seed), prints per-seed before/after scores
and mean +- std of the improvement, and writes `bench/results/demo.md` after every seed.
A seed whose output directory already holds a `results.json` made with the same config is
read back, not re-run, so a killed benchmark resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from executor_sft.demos.demo import load_config, run_demo

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "recipes" / "configs" / "demo.yaml"

METRICS = (
    ("format_valid", "report format valid", 100.0),
    ("em", "EM", 100.0),
    ("f1", "F1", 1.0),
    ("searches_mean", "searches / call", 1.0),
    ("share_2plus_searches", ">=2 searches", 100.0),
    ("tokens_per_subquery", "tokens / sub-query", 1.0),
)


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "-"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def render(results: list[dict], config_path: str, elapsed: float) -> str:
    lines = [
        "# Demo benchmark: SmolLM2-135M executor before/after SFT on held-out sub-queries",
        "",
        f"Command: `python bench/demo_bench.py --config {config_path} --seeds "
        + " ".join(str(r["config"]["seed"]) for r in results)
        + f"`; {len(results)} seed(s), {elapsed / 60:.1f} min wall in all.",
        "Shares in %, F1 in [0, 1]. Each seed generates its own world, collects, filters, trains and evaluates.",
        "",
        "| seed | n | SFT rows | "
        + " | ".join(f"{label} before → after" for _, label, _ in METRICS)
        + " | minutes |",
        "|" + "---|" * (4 + len(METRICS)),
    ]
    for r in results:
        cells = []
        for key, _, scale in METRICS:
            b, a = r["before"][key] * scale, r["after"][key] * scale
            cells.append(f"{b:.1f} → {a:.1f}" if scale != 1.0 or key != "f1" else f"{b:.3f} → {a:.3f}")
        lines.append(
            f"| {r['config']['seed']} | {r['before']['n']} | {sum(r['sft_rows'].values())} | "
            + " | ".join(cells)
            + f" | {r['seconds']['total'] / 60:.1f} |"
        )
    lines += ["", "Improvement (after − before), mean ± std over seeds:", ""]
    lines += ["| metric | improvement |", "|---|---|"]
    for key, label, scale in METRICS:
        deltas = [(r["after"][key] - r["before"][key]) * scale for r in results]
        lines.append(f"| {label} | {_mean_std(deltas)} |")
    if results and results[0].get("teacher"):
        t = [r["teacher"] for r in results]
        lines += [
            "",
            "Scripted teacher on the same sub-queries (reference): EM "
            + _mean_std([x["em"] * 100 for x in t])
            + "%, searches / call "
            + _mean_std([x["searches_mean"] for x in t])
            + ".",
        ]
    versions = {json.dumps(r.get("provenance", {}).get("versions"), sort_keys=True) for r in results}
    lines += [
        "",
        "Made with: "
        + "; ".join(", ".join(f"{k} {v}" for k, v in (json.loads(v) or {}).items()) for v in sorted(versions))
        + ". Index (BM25 over each seed's world corpus) fingerprints: "
        + ", ".join(
            f"seed {r['config']['seed']} {r.get('provenance', {}).get('index', {}).get('corpus_fingerprint')}"
            for r in results
        )
        + ".",
    ]
    lines += [
        "",
        "Per-seed timings (s): "
        + "; ".join(
            f"seed {r['config']['seed']}: " + ", ".join(f"{k} {v:.0f}" for k, v in r["seconds"].items())
            for r in results
        ),
        "",
    ]
    return "\n".join(lines)


def _finished(path: Path, config: dict) -> dict | None:
    """A finished seed's result, if `path` exists and was made with exactly `config`."""
    if not path.exists():
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    return result if result.get("config") == json.loads(json.dumps(config)) else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", default=str(DEFAULT_CONFIG.relative_to(REPO)))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="outputs/demo-bench", help="one sub-directory per seed")
    p.add_argument("--results", default=str(REPO / "bench" / "results" / "demo.md"))
    a = p.parse_args(argv)
    start = time.perf_counter()
    results = []
    for seed in a.seeds:
        cfg = load_config(
            REPO / a.config if not Path(a.config).is_absolute() else a.config,
            {"seed": seed, "out": str(Path(a.out) / f"seed{seed}")},
        )
        done = _finished(Path(cfg.out) / "results.json", cfg.model_dump())
        if done is not None:
            print(f"seed {seed}: reusing {cfg.out}/results.json (same config)", flush=True)
            results.append(done)
        else:
            result = run_demo(cfg)
            print(result.markdown, flush=True)
            results.append(json.loads(json.dumps(result.__dict__)))
        text = render(results, a.config, time.perf_counter() - start)
        Path(a.results).parent.mkdir(parents=True, exist_ok=True)
        Path(a.results).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
