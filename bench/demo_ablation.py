"""Filter ablation on the CPU demo (issue #18): does the counterfactual filter teach *when* to search twice?

    nohup python bench/demo_ablation.py --seeds 0 1 2 > bench/demo_ablation.log 2>&1 &

Per seed, the world, index and collection of `recipes/demo.py` (its config, default
`recipes/configs/demo.yaml`) are made ONCE; the same rollouts are then filtered three ways and
a student is trained on each with the same step budget, random data order and seed:

- (a) naive distillation: every correct teacher and student run, any number of searches
  (the filter's `all_correct` ablation stratum);
- (b) `single_search` only;
- (c) the full filter (`single_search` + `info_gain_multi_search`, the default).

Each trained student, the untrained student and the scripted teacher (references) are
evaluated on the same balanced sample of held-out sub-queries (`subqueries_test.jsonl`: the
first `--per_type` of each type, `single_hop` and `single_hop_ambiguous`, in file order).
The scripted teacher over-searches (`teacher_extra_search_rate`), so (a) sees needless second
searches; (c) keeps only the second searches a one-search re-run proves necessary, which in
this world are the ambiguous sub-queries. Expected: (c) searches twice on ambiguous
sub-queries more than (b), on plain ones less than (a), and spends fewer tokens than (a). The
results file says from the numbers whether that holds.

The world has `--questions` questions (default 300, over the config's value): the demo's
240-question world holds only 12 ambiguous held-out sub-queries for seed 0; 300 gives 17-21
for seeds 0-3. `--questions 0` keeps the config's world (a type with fewer held-out
sub-queries than `--per_type` is evaluated on all it has, with a warning).

Resumable per (variant, seed): each step writes its result (collection, reference
evaluations, each variant's training + evaluation) with the config it was made with, and a
re-run with the same config reads it back instead of redoing it. Results (markdown + JSON)
are rewritten after every finished step.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from executor_sft.demos.demo import (
    DemoConfig,
    _student_model,
    collect_demo,
    evaluate,
    load_config,
    train_demo,
)
from executor_sft.demos.sample_data import ROLLOUTS, SFT, SFT_REPORT, bm25_index, provenance
from executor_sft.filters import (
    ALL_CORRECT,
    SINGLE_SEARCH,
    FilterConfig,
    filter_episodes,
    iter_jsonl,
    write_json,
    write_jsonl,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "recipes" / "configs" / "demo.yaml"
PLAIN, AMBIGUOUS = "single_hop", "single_hop_ambiguous"
TYPES = (PLAIN, AMBIGUOUS)
VARIANTS: dict[str, tuple[str, FilterConfig]] = {
    "a": ("(a) naive: every correct run", FilterConfig(strata=[ALL_CORRECT])),
    "b": ("(b) single_search only", FilterConfig(strata=[SINGLE_SEARCH])),
    "c": ("(c) full filter", FilterConfig()),
}
REFERENCES = {"untrained": "untrained student", "teacher": "scripted teacher"}
# (key, label, scale): the table's metrics; keys are flat keys of `_summary`.
METRICS = (
    ("em", "EM", 100.0),
    (f"em:{PLAIN}", "EM plain", 100.0),
    (f"em:{AMBIGUOUS}", "EM ambiguous", 100.0),
    (f"p2:{PLAIN}", "P(2 searches) plain", 100.0),
    (f"p2:{AMBIGUOUS}", "P(2 searches) ambiguous", 100.0),
    ("tokens", "tokens / sub-query", 1.0),
)
RESULT = "result.json"


def log(msg: str) -> None:
    print(f"[ablation] {msg}", file=sys.stderr, flush=True)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _done(path: Path, key: dict) -> dict | None:
    """The saved result at `path` if it was made with exactly `key`."""
    if not path.exists():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    return saved if saved.get("key") == _jsonable(key) else None


def _save(path: Path, result: dict) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return _jsonable(result)


def _type_of(question) -> str | None:
    return (question.model_extra or {}).get("type")


def balanced_subqueries(path: Path, per_type: int) -> list:
    """The first `per_type` held-out sub-queries of each type in `TYPES`, in file order."""
    from executor_sft.eval.executor_eval import load_subqueries

    rows = load_subqueries(path)
    picked, counts = [], dict.fromkeys(TYPES, 0)
    for q in rows:
        t = _type_of(q)
        if t in counts and counts[t] < per_type:
            counts[t] += 1
            picked.append(q)
    for t, n in counts.items():
        if n < per_type:
            log(f"warning: {path} holds {n} {t} sub-queries (< {per_type}); evaluating all of them")
    return picked


def _summary(result, runs_path: Path, sub_queries: list) -> dict[str, Any]:
    """Overall and per-type scores; per type from `result.by_type` when the evaluator has it,
    else from the per-run JSONL joined with the sub-queries on id."""
    out: dict[str, Any] = {
        "n": result.n,
        "format_valid": result.format_valid,
        "em": result.em,
        "searches_mean": result.searches_mean,
        "p2": result.share_2plus_searches,
        "tokens": result.tokens_per_subquery,
        "seconds": result.seconds,
    }
    by_type = getattr(result, "by_type", None)
    if by_type:
        groups = {
            t: {"n": r.n, "em": r.em, "p2": r.share_2plus_searches, "tokens": r.tokens_per_subquery}
            for t, r in by_type.items()
        }
    else:
        types = {q.id: _type_of(q) for q in sub_queries}
        items: dict[str, list[dict]] = {}
        for line in runs_path.read_text(encoding="utf-8").splitlines():
            score = json.loads(line)["score"]
            items.setdefault(types[score["id"]] or "untyped", []).append(score)
        groups = {
            t: {
                "n": len(xs),
                "em": statistics.mean(x["em"] for x in xs),
                "p2": statistics.mean(float(x["n_searches"] >= 2) for x in xs),
                "tokens": statistics.mean(x["tokens"] for x in xs),
            }
            for t, xs in sorted(items.items())
        }
    for t, g in groups.items():
        for k, v in g.items():
            out[f"{k}:{t}"] = v
    return out


def prepare_seed(cfg: DemoConfig, out: Path, show_progress: bool = True):
    """World, index and collection, once per seed: (world, retriever, index_dir, seconds)."""
    from executor_sft.synthetic import load_world, write_world

    world_dir = out / "world"
    marker = out / "collected.json"
    key = {"config": cfg.model_dump()}
    done = _done(marker, key)
    t = time.perf_counter()
    if done is not None and (out / ROLLOUTS).exists():
        world = load_world(world_dir)
        retriever, index_dir = bm25_index(world_dir / "corpus.jsonl", out / "index")
        log(f"seed {cfg.seed}: reusing world and {done['episodes']} collected episodes in {out}")
        return world, retriever, index_dir, done["seconds"]
    for path in (world_dir, out / "index"):
        shutil.rmtree(path, ignore_errors=True)
    for name in (ROLLOUTS, "rollouts.summary.json", "rollouts.judge_cache.jsonl"):
        (out / name).unlink(missing_ok=True)
    world = write_world(world_dir, cfg.seed, cfg.entities, cfg.questions)
    retriever, index_dir = bm25_index(world_dir / "corpus.jsonl", out / "index")
    seconds = {"world+index": time.perf_counter() - t}
    log(f"seed {cfg.seed}: world + index in {seconds['world+index']:.1f}s; collecting")
    t = time.perf_counter()
    episodes = collect_demo(cfg, out, world, retriever, index_dir, show_progress)
    seconds["collect"] = time.perf_counter() - t
    log(f"seed {cfg.seed}: {episodes} episodes collected in {seconds['collect']:.1f}s")
    _save(marker, {"key": key, "episodes": episodes, "seconds": seconds})
    return world, retriever, index_dir, seconds


def run_reference(name, cfg, out, world, retriever, sub_queries, show_progress=True) -> dict:
    """The untrained student or the scripted teacher on the evaluation sample (resumable)."""
    from executor_sft.synthetic import ScriptedTeacherExecutor

    ref_dir = out / f"ref-{name}"
    key = {"config": cfg.model_dump(), "reference": name, "eval_ids": [q.id for q in sub_queries]}
    if (done := _done(ref_dir / RESULT, key)) is not None:
        log(f"seed {cfg.seed}: reusing {REFERENCES[name]} evaluation")
        return done
    log(f"seed {cfg.seed}: evaluating the {REFERENCES[name]} on {len(sub_queries)} sub-queries")
    model = _student_model(cfg) if name == "untrained" else ScriptedTeacherExecutor(world)
    label = f"{cfg.model} (untrained)" if name == "untrained" else "scripted teacher"
    runs = ref_dir / "eval.jsonl"
    result = evaluate(cfg, model, retriever, sub_queries, label, runs, show_progress)
    if name == "untrained":
        model.close()
    return _save(ref_dir / RESULT, {"key": key, "eval": _summary(result, runs, sub_queries)})


def run_variant(variant, cfg, out, retriever, sub_queries, show_progress=True) -> dict:
    """Filter the seed's rollouts with `variant`, train, evaluate (resumable)."""
    _, filter_cfg = VARIANTS[variant]
    var_dir = out / f"variant-{variant}"
    key = {
        "config": cfg.model_dump(),
        "variant": variant,
        "filter": filter_cfg.to_dict(),
        "eval_ids": [q.id for q in sub_queries],
    }
    if (done := _done(var_dir / RESULT, key)) is not None:
        log(f"seed {cfg.seed} variant {variant}: reusing {var_dir / RESULT} (same config)")
        return done
    var_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    filtered = filter_episodes(iter_jsonl(out / ROLLOUTS), filter_cfg)
    if not filtered.rows:
        raise RuntimeError(f"variant {variant}: the filter kept no rows: {filtered.report['exclusions']}")
    write_jsonl(var_dir / SFT, filtered.rows)
    write_json(var_dir / SFT_REPORT, filtered.report)
    sft_rows = {k: v["records"] for k, v in filtered.report["strata"].items()}
    seconds["filter"] = time.perf_counter() - t
    log(f"seed {cfg.seed} variant {variant}: training on {len(filtered.rows)} rows {sft_rows}")
    t = time.perf_counter()
    ckpt = var_dir / "student-sft"
    shutil.rmtree(ckpt, ignore_errors=True)
    train = train_demo(cfg, var_dir / SFT, ckpt)
    seconds["sft"] = time.perf_counter() - t
    log(f"seed {cfg.seed} variant {variant}: trained in {seconds['sft']:.0f}s; evaluating")
    t = time.perf_counter()
    model = _student_model(cfg, str(ckpt))
    runs = var_dir / "eval.jsonl"
    label = f"{cfg.model} SFT {VARIANTS[variant][0]}"
    result = evaluate(cfg, model, retriever, sub_queries, label, runs, show_progress)
    model.close()
    seconds["eval"] = time.perf_counter() - t
    if not cfg.keep_checkpoint:
        shutil.rmtree(ckpt, ignore_errors=True)
    summary = _summary(result, runs, sub_queries)
    log(
        f"seed {cfg.seed} variant {variant}: EM {100 * summary['em']:.1f}%, "
        f"P(2 searches) plain {100 * summary.get(f'p2:{PLAIN}', 0):.1f}% / ambiguous "
        f"{100 * summary.get(f'p2:{AMBIGUOUS}', 0):.1f}%, {summary['tokens']:.0f} tokens / sub-query"
    )
    return _save(
        var_dir / RESULT,
        {
            "key": key,
            "sft_rows": sft_rows,
            "train_metrics": {k: v for k, v in train.metrics.items() if isinstance(v, int | float)},
            "eval": summary,
            "seconds": seconds,
        },
    )


def run_seed(
    cfg: DemoConfig,
    variants: list[str],
    per_type: int = 16,
    *,
    show_progress: bool = True,
    on_step=None,
) -> dict[str, Any]:
    """One seed: collect once, evaluate the references, train and evaluate each variant.

    `on_step(partial)` is called with the seed's partial result after every finished step.
    """
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    world, retriever, index_dir, collect_seconds = prepare_seed(cfg, out, show_progress)
    sub_queries = balanced_subqueries(out / "world" / "subqueries_test.jsonl", per_type)
    partial: dict[str, Any] = {
        "seed": cfg.seed,
        "config": cfg.model_dump(),
        "provenance": provenance(cfg, index_dir),
        "eval_set": {t: sum(_type_of(q) == t for q in sub_queries) for t in TYPES},
        "seconds": dict(collect_seconds),
        "references": {},
        "variants": {},
    }
    for name in REFERENCES:
        ref = run_reference(name, cfg, out, world, retriever, sub_queries, show_progress)
        partial["references"][name] = ref["eval"]
        partial["seconds"][f"eval_{name}"] = ref["eval"]["seconds"]
        if on_step:
            on_step(partial)
    for v in variants:
        res = run_variant(v, cfg, out, retriever, sub_queries, show_progress)
        partial["variants"][v] = {k: res[k] for k in ("sft_rows", "train_metrics", "eval", "seconds")}
        partial["seconds"][f"variant_{v}"] = sum(res["seconds"].values())
        if on_step:
            on_step(partial)
    return partial


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def _stats(values: list[float]) -> tuple[float, float | None]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _cell(values: list[float], scale: float) -> str:
    if not values:
        return "-"
    mean, std = _stats([v * scale for v in values])
    digits = 0 if scale == 1.0 else 1
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def _values(seeds: list[dict], getter) -> list[float]:
    out = []
    for s in seeds:
        try:
            value = getter(s)
        except KeyError:
            continue
        if value is not None:
            out.append(value)
    return out


def _eval_of(seed: dict, row: str) -> dict:
    """A seed's evaluation summary for a variant or reference row (KeyError if it has none)."""
    return seed["variants"][row]["eval"] if row in VARIANTS else seed["references"][row]


def aggregate(seeds: list[dict]) -> dict[str, dict[str, dict[str, float | None]]]:
    """row -> metric -> {mean, std, n} over seeds (rows: variants, then references)."""
    rows: dict[str, Any] = {}
    names = [v for v in VARIANTS if any(v in s["variants"] for s in seeds)] + list(REFERENCES)
    for row in names:
        metrics = {}
        for key, _, _ in METRICS:
            vals = _values(seeds, lambda s, r=row, k=key: _eval_of(s, r).get(k))
            if vals:
                mean, std = _stats(vals)
                metrics[key] = {"mean": mean, "std": std, "n": len(vals)}
        if metrics:
            rows[row] = metrics
    return rows


def _compare(agg, key, this, other, want: str, what: str) -> tuple[str, bool] | None:
    if this not in agg or other not in agg or key not in agg[this] or key not in agg[other]:
        return None
    scale = 1.0 if key == "tokens" else 100.0
    unit = " tokens" if key == "tokens" else "%"
    x, y = agg[this][key], agg[other][key]
    holds = x["mean"] > y["mean"] if want == "more" else x["mean"] < y["mean"]
    fmt = (lambda v: f"{v * scale:.0f}") if key == "tokens" else (lambda v: f"{v * scale:.1f}")
    verb = {"more": "more than", "less": "less than"}[want] if holds else f"not {want} than"
    text = (
        f"{what}: (c) {fmt(x['mean'])}{unit} vs ({other}) {fmt(y['mean'])}{unit}, so (c) is {verb} ({other})"
        + (" as expected." if holds else ", contrary to the expectation.")
    )
    stds = [s for s in (x["std"], y["std"]) if s is not None]
    if stds and abs(x["mean"] - y["mean"]) <= max(stds):
        text += f" The difference is within one standard deviation over seeds ({fmt(max(stds))}{unit})."
    elif not stds:
        text += " (One seed: no spread to judge noise by.)"
    return text, holds


def where_needed(seeds: list[dict], variant: str) -> str | None:
    """Does `variant` search twice more on ambiguous sub-queries (where a second search is needed)
    than on plain ones? Per seed, since a mean can hide a seed that searches twice everywhere."""
    pairs = [
        (
            s["seed"],
            s["variants"][variant]["eval"].get(f"p2:{PLAIN}"),
            s["variants"][variant]["eval"].get(f"p2:{AMBIGUOUS}"),
        )
        for s in seeds
        if variant in s["variants"]
    ]
    pairs = [(seed, p, a) for seed, p, a in pairs if p is not None and a is not None]
    if not pairs:
        return None
    better = sum(a > p for _, p, a in pairs)
    never = sum(a == p == 0 for _, p, a in pairs)
    per_seed = ", ".join(f"seed {seed} {100 * p:.1f}/{100 * a:.1f}" for seed, p, a in pairs)
    return (
        f"Where the second search is needed, ({variant}): two searches on plain/ambiguous sub-queries "
        f"({per_seed}%); more on ambiguous than on plain in {better} of {len(pairs)} seed(s), "
        f"never twice in {never}."
    )


def conclusions(agg, seeds: list[dict] | None = None) -> list[str]:
    """Sentences, computed from the results, on the three expectations of the ablation and on
    whether each variant searches twice where it is needed."""
    checks = [
        _compare(agg, f"p2:{AMBIGUOUS}", "c", "b", "more", "Two searches on ambiguous sub-queries"),
        _compare(agg, f"p2:{PLAIN}", "c", "a", "less", "Two searches on plain sub-queries"),
        _compare(agg, "tokens", "c", "a", "less", "Tokens per sub-query"),
    ]
    done = [c for c in checks if c is not None]
    lines = [text for text, _ in done]
    if done:
        held = sum(ok for _, ok in done)
        lines.append(
            f"{held} of {len(done)} expectation(s) hold"
            + (" (the others need variants that were not run)." if len(done) < 3 else ".")
        )
    else:
        lines.append("No comparison: variant (c) with (a) or (b) is needed.")
    for variant in VARIANTS:
        if (line := where_needed(seeds or [], variant)) is not None:
            lines.append(line)
    return lines


def render(seeds: list[dict], command: str, elapsed: float) -> str:
    agg = aggregate(seeds)
    header = ["row", "SFT rows"] + [label for _, label, _ in METRICS]
    lines = [
        "# Filter ablation on the CPU demo: naive vs single_search vs full filter",
        "",
        f"Command: `{command}`; {len(seeds)} seed(s), {elapsed / 60:.1f} min wall in this invocation "
        "(steps read back from a previous run cost nothing).",
        "Each seed collects once; every variant trains from the same rollouts with the same steps, "
        "random data order and seed. Evaluation: held-out sub-queries ("
        + "; ".join(
            f"seed {s['seed']}: " + ", ".join(f"{n} {t}" for t, n in s["eval_set"].items()) for s in seeds
        )
        + "), greedy. Shares and EM in %, mean ± std over seeds; plain = `single_hop`, "
        "ambiguous = `single_hop_ambiguous`; P(2 searches) = share of runs with ≥ 2 searches.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row, label in [(v, VARIANTS[v][0]) for v in VARIANTS] + [
        (r, f"{lbl} (reference)") for r, lbl in REFERENCES.items()
    ]:
        if row not in agg:
            continue
        if row in VARIANTS:
            rows = _cell(_values(seeds, lambda s, r=row: sum(s["variants"][r]["sft_rows"].values())), 1.0)
        else:
            rows = "-"
        cells = [
            _cell(_values(seeds, lambda s, r=row, k=key: _eval_of(s, r).get(k)), scale)
            for key, _, scale in METRICS
        ]
        lines.append(f"| {label} | {rows} | " + " | ".join(cells) + " |")
    lines += ["", *conclusions(agg, seeds), ""]
    lines += [
        "Per seed:",
        "",
        "| seed | row | SFT rows by stratum | " + " | ".join(lb for _, lb, _ in METRICS) + " |",
    ]
    lines.append("|" + "---|" * (3 + len(METRICS)))
    for s in seeds:
        for v, res in s["variants"].items():
            cells = [_cell([res["eval"][k]] if k in res["eval"] else [], sc) for k, _, sc in METRICS]
            strata = ", ".join(f"{k} {n}" for k, n in res["sft_rows"].items())
            lines.append(f"| {s['seed']} | ({v}) | {strata} | " + " | ".join(cells) + " |")
    versions = {json.dumps(s["provenance"].get("versions"), sort_keys=True) for s in seeds}
    lines += [
        "",
        "Made with: "
        + "; ".join(", ".join(f"{k} {v}" for k, v in (json.loads(v) or {}).items()) for v in sorted(versions))
        + ". Index (BM25 over each seed's world corpus) fingerprints: "
        + ", ".join(f"seed {s['seed']} {s['provenance']['index']['corpus_fingerprint']}" for s in seeds)
        + ".",
        "",
        f"Sum of the step timings: {sum(sum(s['seconds'].values()) for s in seeds) / 60:.1f} min. "
        "Per-seed timings (s): "
        + "; ".join(
            f"seed {s['seed']}: " + ", ".join(f"{k} {v:.0f}" for k, v in s["seconds"].items()) for s in seeds
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(DEFAULT_CONFIG.relative_to(REPO)))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--out", default="outputs/demo-ablation", help="one sub-directory per seed")
    p.add_argument("--results", default=str(REPO / "bench" / "results" / "demo_ablation.md"))
    p.add_argument("--per_type", type=int, default=16, help="held-out sub-queries of each type")
    p.add_argument(
        "--questions",
        type=int,
        default=300,
        help="world questions, over the config's value (0: the config's); 300 gives >= 16 "
        "ambiguous held-out sub-queries for seeds 0-3 with 400 entities",
    )
    p.add_argument(
        "--max_steps",
        type=int,
        default=None,
        help="SFT steps, over the config's value (e.g. 64 to ask whether a longer run learns when to search twice)",
    )
    a = p.parse_args(argv)
    command = "python bench/demo_ablation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results_md = Path(a.results)
    results_json = results_md.with_suffix(".json")
    start = time.perf_counter()
    finished: list[dict] = []

    def write(current: dict | None) -> str:
        seeds = finished + ([current] if current is not None else [])
        text = render(seeds, command.strip(), time.perf_counter() - start)
        results_md.parent.mkdir(parents=True, exist_ok=True)
        results_md.write_text(text, encoding="utf-8")
        results_json.write_text(
            json.dumps({"command": command.strip(), "seeds": seeds, "summary": aggregate(seeds)}, indent=2)
            + "\n",
            encoding="utf-8",
        )
        return text

    for seed in a.seeds:
        overrides: dict[str, Any] = {"seed": seed, "out": str(Path(a.out) / f"seed{seed}")}
        if a.questions:
            overrides["questions"] = a.questions
        if a.max_steps:
            overrides["max_steps"] = a.max_steps
        cfg = load_config(REPO / a.config if not Path(a.config).is_absolute() else a.config, overrides)
        log(f"seed {seed}: variants {' '.join(a.variants)} -> {cfg.out}")
        finished.append(run_seed(cfg, a.variants, a.per_type, on_step=write))
    text = write(None)
    print(text, flush=True)
    log(f"done in {(time.perf_counter() - start) / 60:.1f} min; wrote {results_md} and {results_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
