"""The CPU fast path, measured side by side in one run: an SFT step and executor generation.

    python bench/cpu_fast_path.py                      # everything (~45 min on 2 idle cores)
    python bench/cpu_fast_path.py --print_fast_flags   # the recipe flags of the fast path, one line
    accelerate launch recipes/sft_executor.py $(python bench/cpu_fast_path.py --print_fast_flags)

Data: the demo's world and collection for seed 0 (`recipes/configs/demo.yaml`, 300 questions as
the ablation uses), made once into `--work` and reused; its SFT rows are the full filter's.

SFT: each configuration trains SmolLM2-135M through the recipe's own `train_executor`
(`recipes/sft_executor.py`'s `main`) on those rows with the demo's settings (batch 2, lr 2e-4,
cosine, warmup 0.1, max_length 1024, seed 0, random order), 16 steps, into its own folder.
Reported: seconds per step (train_runtime / steps) and the loss at every step.

Generation: the student trained by the fast configuration (or the last one trained), evaluated
as the ablation does (the first 16 held-out sub-queries of each type, mean@4 at T=0.6: 128 runs,
24 at once, 64 new tokens a turn) on each of `GENERATION_PATHS` (today's; grouped-head attention
and the appending cache; both plus prefix reuse); and one executor run of 3 turns (the first
evaluated sub-query whose greedy run takes 3 turns), alone, greedy, on each path. Reported: wall
seconds, prompt tokens asked for, tokens prefilled.

Configurations run in the order given, on one machine; the load average before and after each
is recorded, since a second job on 2 cores slows torch 2-3x.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "recipes"))

EXACT_FLAGS = ["--gathered_loss", "true", "--optim", "adamw_torch_fused"]
"""TRL's training to fp32 rounding: the LM head at trained positions only, AdamW in one kernel."""
BF16_FLAGS = ["--bf16", "true", "--use_cpu", "true"]
"""bf16 autocast over fp32 weights: a different rounding, so a loss curve equal within noise."""
COMPILE_FLAGS = ["--compile_layers", "true"]


def fast_flags() -> list[str]:
    """The fast path on this machine: bf16 autocast only where the CPU multiplies bf16 in hardware."""
    from executor_sft.sft.models import cpu_has_native_bf16

    return [*EXACT_FLAGS, *(BF16_FLAGS if cpu_has_native_bf16() else []), *COMPILE_FLAGS]


DEMO_FLAGS = [
    "--learning_rate",
    "2e-4",
    "--lr_scheduler_type",
    "cosine",
    "--warmup_steps",
    "0.1",
    "--max_length",
    "1024",
    "--train_sampling_strategy",
    "random",
    "--gradient_checkpointing",
    "false",
    "--seed",
    "0",
    "--data_seed",
    "0",
]
CONFIGS: dict[str, list[str]] = {
    "trl_default": [],
    "gathered_loss": ["--gathered_loss", "true"],
    "gathered + fused AdamW": EXACT_FLAGS,
    "gathered + fused + bf16": [*EXACT_FLAGS, *BF16_FLAGS],
    "fast (gathered + fused + bf16 + compile)": [*EXACT_FLAGS, *BF16_FLAGS, *COMPILE_FLAGS],
    "fast + top 8 layers": [*EXACT_FLAGS, *BF16_FLAGS, *COMPILE_FLAGS, "--trainable_layers", "8"],
    "trainable_layers_8": ["--trainable_layers", "8"],
    "lora_r16": [
        "--use_peft",
        "true",
        "--lora_r",
        "16",
        "--lora_alpha",
        "32",
        "--lora_target_modules",
        "all-linear",
    ],
}
FAST = "fast (gathered + fused + bf16 + compile)"
PER_TYPE, SAMPLES, TEMPERATURE = 16, 4, 0.6


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def log(msg: str) -> None:
    print(f"[cpu_fast_path] {msg}", file=sys.stderr, flush=True)


def demo_data(work: Path, per_type: int = PER_TYPE):
    """The demo's config, world, retriever, SFT rows and held-out sample for seed 0 (made once)."""
    import demo_ablation

    from executor_sft.demos.demo import load_config

    cfg = load_config(REPO / "recipes" / "configs" / "demo.yaml", {"questions": 300, "out": str(work)})
    _, retriever, _, _ = demo_ablation.prepare_seed(cfg, work, show_progress=False)
    sft = work / "sft-c.jsonl"
    if not sft.exists():
        from executor_sft.filters import FilterConfig, filter_episodes, iter_episodes_by_id, write_jsonl

        write_jsonl(sft, filter_episodes(iter_episodes_by_id(work / "rollouts.jsonl"), FilterConfig()).rows)
    sub_queries = demo_ablation.balanced_subqueries(work / "world" / "subqueries_test.jsonl", per_type)
    return cfg, retriever, sft, sub_queries


def run_config(name: str, flags: list[str], steps: int, sft: Path, out: Path) -> dict:
    import sft_executor

    argv = [
        "--dataset_name",
        str(sft),
        "--output_dir",
        str(out),
        "--max_steps",
        str(steps),
        "--per_device_train_batch_size",
        "2",
        "--fresh",
        "true",
        "--disable_tqdm",
        "true",
        "--logging_steps",
        "1",
        *DEMO_FLAGS,
        *flags,
    ]
    from transformers import TrainerCallback

    from executor_sft.sft.train import train_executor

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            if not self.ends:
                self.ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    timer = StepTimer()
    before = load()
    start = time.perf_counter()
    result = train_executor(*sft_executor.parse_args(argv), callbacks=[timer])
    wall = time.perf_counter() - start
    state = json.loads((out / "trainer_state.json").read_text(encoding="utf-8"))
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    step_s = [b - a for a, b in itertools.pairwise(timer.ends)]
    return {
        "config": name,
        "flags": " ".join(flags),
        "s_per_step": float(result.metrics["train_runtime"]) / steps,
        "step_s": step_s,
        "steady_s_per_step": statistics.median(step_s[2:]) if len(step_s) > 2 else None,
        "wall_s": wall,
        "last_loss": losses[-1],
        "mean_loss": sum(losses) / len(losses),
        "losses": losses,
        "load": [before, load()],
    }


GENERATION_PATHS: dict[str, dict[str, Any]] = {
    "today (before #38)": {"reuse": False, "kernels": False, "dtype": "float32"},
    "grouped attention + appending cache": {"reuse": False, "kernels": True, "dtype": "float32"},
    "fast (+ prefix reuse)": {"reuse": True, "kernels": True, "dtype": "float32"},
}
"""The generation paths compared, slowest first: `kernels` is grouped-head attention
(`llm.gqa_attention`) with the in-place appending KV cache (`llm.append_cache`); `reuse` is prefix
reuse across turns (`llm.prefix_cache`); `dtype` the student's weights.
"today" is the backend as it generated before the fast path: transformers' `sdpa` and
`DynamicCache`, every turn prefilled in full, fp32."""


def student(path: Path, cfg, reuse: bool, kernels: bool = True, dtype: str = "float32"):
    from executor_sft.llm import TransformersChatModel

    model = TransformersChatModel(
        str(path),
        name=str(path),
        dtype=dtype,
        max_batch_size=cfg.eval_concurrency,
        prefix_cache_tokens=cfg.eval_prefix_cache_tokens if reuse else 0,
    )
    if not kernels:  # the backend's generation before the fast path, for the side-by-side only
        model.model.set_attn_implementation("sdpa")
        model._append_cache = False
    return model


def evaluation(cfg, checkpoint: Path, retriever, sub_queries, out: Path, path_name: str) -> dict:
    """The ablation's mean@4 evaluation (128 runs at the default --per_type) of `checkpoint`
    on one of `GENERATION_PATHS`."""
    import torch

    from executor_sft.demos.demo import evaluate

    options = GENERATION_PATHS[path_name]
    mode = cfg.model_copy(update={"eval_samples": SAMPLES, "eval_temperature": TEMPERATURE})
    model = student(checkpoint, cfg, **options)
    runs = out / f"eval-{''.join(ch if ch.isalnum() else '_' for ch in path_name)}.jsonl"
    runs.unlink(missing_ok=True)
    torch.manual_seed(0)
    before = load()
    start = time.perf_counter()
    result = evaluate(mode, model, retriever, sub_queries, "fast-path student", runs, show_progress=True)
    wall = time.perf_counter() - start
    model.close()
    return {
        "path": path_name,
        **options,
        "runs": result.n,
        "wall_s": wall,
        "em": result.em,
        "tokens_per_subquery": result.tokens_per_subquery,
        "share_2plus_searches": result.share_2plus_searches,
        "prefix_stats": model.prefix_stats.to_dict(),
        "load": [before, load()],
    }


def three_turn_run(cfg, checkpoint: Path, retriever, sub_queries, path_name: str, question=None) -> dict:
    """One executor run alone, greedy, of `question` on one of `GENERATION_PATHS`; without one,
    the first held-out sub-query whose run takes 3 turns (else the one whose run took most)."""
    from executor_sft.agents.executor import run_executor
    from executor_sft.demos.demo import eval_settings
    from executor_sft.llm.prefix_cache import PrefixStats

    options = GENERATION_PATHS[path_name]
    settings = eval_settings(cfg.model_copy(update={"eval_temperature": 0.0}))
    model = student(checkpoint, cfg, **options)
    best: dict | None = None
    for q in [question] if question is not None else sub_queries:
        if model.prefix_cache is not None:
            model.prefix_cache.clear()
        model.prefix_stats = PrefixStats()
        before = load()
        start = time.perf_counter()
        run = asyncio.run(run_executor(model, retriever, q.question, settings))
        record = {
            "path": path_name,
            **options,
            "question": q,
            "turns": len(run.calls),
            "wall_s": time.perf_counter() - start,
            "prefix_stats": model.prefix_stats.to_dict(),
            "replies": [m.get("content") for m in run.messages if m.get("role") == "assistant"],
            "load": [before, load()],
        }
        if best is None or record["turns"] > best["turns"]:
            best = record
        if record["turns"] >= 3:
            break
    model.close()
    return best


def write_markdown(result: dict[str, Any], path: Path) -> None:
    sft, gen = result["sft"], result["generation"]
    base = sft[0]["s_per_step"] if sft else None
    commands = " and ".join(f"`{c}`" for c in result["commands"])
    lines = [
        "# CPU fast path, measured side by side",
        "",
        f"{commands}, on {result['machine']}, one row after the other; commit {result['commit']}.",
        "Load average (1, 5, 15 min) before and after each row is in the JSON; before the first row: "
        f"{result['load_start']}, after the last: {result['load_end']}.",
        "",
    ]
    if sft:
        lines += [
            "## An SFT step (SmolLM2-135M, fp32 weights, the demo's rows and settings, batch 2)",
            "",
            f"CPU: {result.get('cpu', 'not recorded')}. s/step is train_runtime / steps (compiling "
            "included); steady is the median step after the first two.",
            "",
            "| configuration | flags | s/step | speed-up vs TRL defaults | steady s/step | steady speed-up "
            "| loss at the last step | mean loss | largest per-step loss difference from TRL's |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        steady_base = sft[0].get("steady_s_per_step")
        for r in sft:
            diff = max(abs(a - b) for a, b in zip(r["losses"], sft[0]["losses"], strict=True))
            steady = r.get("steady_s_per_step")
            steady_cells = f"{steady:.2f} | {steady_base / steady:.2f}x" if steady and steady_base else " | "
            lines.append(
                f"| {r['config']} | `{r['flags'] or '(none)'}` | {r['s_per_step']:.2f} | "
                f"{base / r['s_per_step']:.2f}x | {steady_cells} | {r['last_loss']:.4f} | "
                f"{r['mean_loss']:.4f} | {diff:.1e} |"
            )
        lines += ["", "Per-step losses:", ""]
        lines += [f"- {r['config']}: " + ", ".join(f"{x:.3f}" for x in r["losses"]) for r in sft]
        lines.append("")
    if gen:
        lines += [
            "## Generation (the fast configuration's student, SmolLM2-135M)",
            "",
            "Paths: " + "; ".join(f"**{name}**" for name in GENERATION_PATHS) + ". Speed-up is against "
            "the first path measured in the same table.",
            "",
            "| what | path | prefix reuse | weights | wall s | speed-up | prompt tokens | tokens prefilled | EM |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for what in ("three_turns", "evaluation"):
            rows = gen.get(what) or []
            for r in rows:
                asked, filled = r["prefix_stats"]["prompt_tokens"], r["prefix_stats"]["prefilled_tokens"]
                label = (
                    f"one executor run, {r['turns']} turns, greedy"
                    if what == "three_turns"
                    else f"{r['runs']} runs (mean@4, T=0.6)"
                )
                em = f"{100 * r['em']:.1f}%" if "em" in r else ""
                lines.append(
                    f"| {label} | {r.get('path', '')} | {'on' if r['reuse'] else 'off'} | "
                    f"{r.get('dtype', 'float32')} | {r['wall_s']:.1f} | "
                    f"{rows[0]['wall_s'] / r['wall_s']:.2f}x | {asked} | {filled} | {em} |"
                )
        if "same_replies" in gen:
            lines += ["", f"The 3-turn run's replies are the same on every path: {gen['same_replies']}."]
        lines.append("")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, path)


def save(result: dict[str, Any], out: Path) -> None:
    """`out` (.md) and its .json, each replaced whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    result["load_end"] = load()
    write_markdown(result, out)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, out.with_suffix(".json"))


def render(sft_path: str, generation_paths: list[str], out: Path) -> None:
    """`out` (.md and .json) from saved runs: the SFT rows of `sft_path` and the generation rows of
    `generation_paths`, in the order given (speed-ups are against the first row)."""
    sft = json.loads(Path(sft_path).read_text(encoding="utf-8"))
    gens = [json.loads(Path(p).read_text(encoding="utf-8")) for p in generation_paths]
    generation: dict[str, Any] = {}
    for run in gens:
        for what, rows in run["generation"].items():
            if isinstance(rows, list):
                generation.setdefault(what, []).extend(rows)
    replies = [row["replies"] for row in generation.get("three_turns", [])]
    if replies:
        generation["same_replies"] = all(r == replies[0] for r in replies)
    runs = [sft, *gens]
    merged = {
        **sft,
        "commands": [c for r in runs for c in r.get("commands") or [r["command"]]],
        "commit": " / ".join(dict.fromkeys(r["commit"] for r in runs)),
        "load_start": sft["load_start"],
        "load_end": runs[-1]["load_end"],
        "generation": generation,
    }
    write_markdown(merged, out)
    out.with_suffix(".json").write_text(json.dumps(merged, indent=1, default=str) + "\n", encoding="utf-8")


def cpu_description() -> str:
    """The CPU's model name and bf16 support, which decide what bf16 autocast is worth."""
    import platform

    import torch

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    caps = torch.cpu.get_capabilities()
    bf16 = [k for k in ("avx512_bf16", "amx_bf16") if caps.get(k)]
    return f"{name}, {torch.backends.cpu.get_cpu_capability()}, bf16 in hardware: {', '.join(bf16) or 'no'}"


def _commit() -> str:
    import subprocess

    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--print_fast_flags", action="store_true", help="Print the fast path's recipe flags.")
    parser.add_argument("--steps", type=int, default=16, help="Training steps per configuration.")
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), help="SFT configurations, in order.")
    parser.add_argument("--generation", choices=["all", "three_turns", "none"], default="all")
    parser.add_argument("--work", default="outputs/cpu-fast-path", help="World, rows and checkpoints.")
    parser.add_argument(
        "--per_type",
        type=int,
        default=PER_TYPE,
        help="Held-out sub-queries of each type in the generation part's evaluation (x2 types x4 samples runs).",
    )
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=list(GENERATION_PATHS),
        help="Generation paths to compare, in order (default: all, slowest first).",
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "cpu_fast_path.md"))
    parser.add_argument(
        "--render",
        nargs="+",
        metavar="JSON",
        help="Only write --out from saved results: the SFT rows of the first file, the generation "
        "rows of the others in order (e.g. one run per part).",
    )
    args = parser.parse_args()
    if args.print_fast_flags:
        print(" ".join(fast_flags()))
        return
    if args.render:
        render(args.render[0], args.render[1:], Path(args.out))
        return
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {list(CONFIGS)}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "commands": [shlex.join(["python", "bench/cpu_fast_path.py", *sys.argv[1:]])],
        "machine": f"{os.cpu_count()} CPU cores",
        "cpu": cpu_description(),
        "commit": _commit(),
        "load_start": load(),
        "sft": [],
        "generation": {},
    }
    cfg, retriever, sft, sub_queries = demo_data(work, args.per_type)
    out = None
    for name in args.configs:
        out = work / ("sft-" + "".join(ch if ch.isalnum() else "_" for ch in name))
        result["sft"].append(run_config(name, CONFIGS[name], args.steps, sft, out))
        log(json.dumps({k: v for k, v in result["sft"][-1].items() if k != "losses"}))
        save(result, Path(args.out))  # a later crash keeps the finished rows (`--render` them)
    # The generation part evaluates the fast configuration's student (or the last one trained).
    fast_dir = work / ("sft-" + "".join(ch if ch.isalnum() else "_" for ch in FAST))
    checkpoint = fast_dir if FAST in args.configs or not args.configs else out
    paths = args.paths or list(GENERATION_PATHS)
    if args.generation != "none":
        first = three_turn_run(cfg, checkpoint, retriever, sub_queries, paths[0])
        runs = [first] + [
            three_turn_run(cfg, checkpoint, retriever, sub_queries, p, question=first["question"])
            for p in paths[1:]
        ]
        for r in runs:
            r["question"] = r["question"].id
        result["generation"]["three_turns"] = runs
        result["generation"]["same_replies"] = all(r["replies"] == first["replies"] for r in runs)
        log("three turns: " + ", ".join(f"{r['path']} {r['wall_s']:.1f}s" for r in runs))
        save(result, Path(args.out))
    if args.generation == "all":
        result["generation"]["evaluation"] = []
        for p in paths:
            result["generation"]["evaluation"].append(
                evaluation(cfg, checkpoint, retriever, sub_queries, work, p)
            )
            log(f"evaluation, {p}: {result['generation']['evaluation'][-1]['wall_s']:.1f}s")
            save(result, Path(args.out))
    save(result, Path(args.out))
    print(Path(args.out).read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
