"""Can the student's model tell, at its decision, whether its first results hold the gold passage?

    python bench/demo_ablation_decoupled.py --prepare_only --out /work/decoupled_runs  # worlds, rollouts
    python bench/decoupled_readout.py --out /work/decoupled_runs

The decoupled ablation's students recall each trained sub-query's decision instead of reading their
first results (`bench/results/demo_ablation_decoupled.md`, the edit at the students' own rows). This
asks the capacity and rows questions of that failure directly, on pairs of the teacher's turn-2
prompts (`bench.probing.readout`) that differ only in the first results: as collected, and edited
(`bench.probing.edit`: the gold passage put first where it was missing; swapped for a same-worded
namesake passage where it was shown). Within a pair the sub-query is the same, so nothing in it, the
descriptor cue included, tells the two apart.

A logistic readout of the frozen model's last-token hidden state (middle and last layer), its L2
strength chosen by 5-fold cross-validation over subject entities on the train split:

- **fitted on the train split's pairs:** is "the first results miss the gold passage" present in the
  representation, linearly, for people never seen? If not, the model lacks the capacity to read it
  there, whatever rows it is given.
- **fitted on the train split's prompts as collected** (one per sub-query, as training rows show
  them): does data of that shape point a readout at the passages or at the sub-query? If the pairs
  readout reads and this one does not, the rows are what is missing.

Each is scored on the held-out pairs by pair accuracy (the share of pairs whose miss member scores
above its hit member; ties count half; 0.5 is chance) with a 95% interval from resampling subject
entities, and by balanced accuracy over all held-out members. The model's own P(search again) gets
the same pair accuracy: does its decision follow the passages?

The readout fitted on pairs sees twice the prompts of the one fitted as collected; the same readout
on half the pairs, drawn at random 10 times, sees as many, so the two differ in pairing alone.

Models: the untrained base and each `variant-*/student-sft` under a seed folder, or `--models`. A
rerun computes the models it is given and keeps the others' figures from `--results`.json; each
model's hidden states are kept under `--out`/seed<k>/readout/ and reused while its weights and the
prompts are the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]

from bench.probing.readout import (  # noqa: E402
    balanced_accuracy,
    by_entity_interval,
    fit_logistic,
    heldout_prompts,
    prompt_states,
    train_prompts,
)
from bench.probing.results import provenance, write_results  # noqa: E402

RESULTS = REPO / "bench" / "results" / "demo_ablation_decoupled_readout"
DONE_DIR = REPO / "bench" / "results" / "demo_ablation_decoupled"
L2_GRID = (0.1, 1.0, 10.0, 100.0)
LAYERS = ("middle", "last")
BASE = "base (untrained)"


def log(msg: str) -> None:
    print(f"[readout] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# pairs
# ------------------------------------------------------------------------------------------


def pairs(world, prompts: list, missed: list[bool], subjects: list[str], golds: list[str]) -> dict[str, list]:
    """Each prompt with an edit, beside its edited copy: `collected`, `edited`, `missed` (whether the
    collected one misses the gold passage; the edited one is the other way) and `subjects`."""
    from dataclasses import replace

    from bench.probing.edit import edit_first_results

    out: dict[str, list] = {"collected": [], "edited": [], "missed": [], "subjects": []}
    for prompt, m, subject, gold in zip(prompts, missed, subjects, golds, strict=True):
        edit = edit_first_results(world, prompt.messages, gold)
        if edit is None:
            continue
        assert (edit[0] == "miss") == m, f"the edit's side disagrees with the label at {prompt.id}"
        out["collected"].append(prompt)
        out["edited"].append(replace(prompt, messages=edit[1]))
        out["missed"].append(m)
        out["subjects"].append(subject)
    return out


def seed_pairs(seed_dir: Path, world_file: dict) -> tuple[dict, dict]:
    """The train split's and the held-out pairs of one prepared seed folder."""
    from executor_sft.files import read_jsonl
    from executor_sft.synthetic import load_world

    world_dir = seed_dir / "world"
    world = load_world(world_dir)
    train_gold = {
        r["question"]: r["positive_doc_ids"][0] for r in read_jsonl(world_dir / "subqueries_train.jsonl")
    }
    test_gold = {r["id"]: r["positive_doc_ids"][0] for r in read_jsonl(world_dir / "subqueries_test.jsonl")}
    tp, tm, ts = train_prompts(seed_dir)
    hp, hm, hs = heldout_prompts(seed_dir, world_file)
    return (
        pairs(world, tp, tm, ts, [train_gold[p.id] for p in tp]),
        pairs(world, hp, hm, hs, [test_gold[p.id] for p in hp]),
    )


# ------------------------------------------------------------------------------------------
# scores
# ------------------------------------------------------------------------------------------


def pair_wins(collected: list[float], edited: list[float], missed: list[bool]) -> list[float]:
    """Per pair: 1 where the miss member scores above the hit member, 0.5 on a tie, else 0."""
    out = []
    for c, e, m in zip(collected, edited, missed, strict=True):
        miss, hit = (c, e) if m else (e, c)
        out.append(1.0 if miss > hit else 0.5 if miss == hit else 0.0)
    return out


def pair_accuracy(wins: list[float], subjects: list[str]) -> dict:
    """The mean of `pair_wins` with its 95% interval over subject entities."""
    return by_entity_interval(lambda v, _: statistics.fmean(v), wins, [True] * len(wins), subjects)


def choose_l2(x, y: list[bool], subjects: list[str], folds: int = 5) -> float:
    """The L2 strength of `L2_GRID` with the best mean balanced accuracy over `folds` folds of subject
    entities (the smallest on a tie)."""
    keys = sorted(set(subjects))
    fold_of = {k: i % folds for i, k in enumerate(keys)}
    best, best_score = L2_GRID[0], -1.0
    for l2 in L2_GRID:
        scores = []
        for f in range(folds):
            tr = [i for i, s in enumerate(subjects) if fold_of[s] != f]
            te = [i for i, s in enumerate(subjects) if fold_of[s] == f]
            if len({y[i] for i in tr}) < 2:
                continue
            score = fit_logistic(x[tr], [y[i] for i in tr], l2=l2)
            acc = balanced_accuracy([bool(v > 0) for v in score(x[te])], [y[i] for i in te])
            if acc == acc:
                scores.append(acc)
        mean = statistics.fmean(scores) if scores else -1.0
        if mean > best_score:
            best, best_score = l2, mean
    return best


def readout(x_fit, y_fit: list[bool], subjects_fit: list[str], x_pair: tuple, held: dict) -> dict[str, Any]:
    """Fit on (`x_fit`, `y_fit`); score on the held-out pairs' features `x_pair` (collected, edited)."""
    import numpy as np

    l2 = choose_l2(x_fit, y_fit, subjects_fit)
    score = fit_logistic(x_fit, y_fit, l2=l2)
    sc, se = score(x_pair[0]), score(x_pair[1])
    members = [*held["missed"], *(not m for m in held["missed"])]
    return {
        "l2": l2,
        "pair_accuracy": pair_accuracy(pair_wins(list(sc), list(se), held["missed"]), held["subjects"]),
        "balanced_accuracy": balanced_accuracy(list(np.r_[sc, se] > 0), members),
    }


PARTS = (
    ("train_collected", "train", "collected"),
    ("train_edited", "train", "edited"),
    ("held_collected", "held", "collected"),
    ("held_edited", "held", "edited"),
)


def states_key(name: str, train: dict, held: dict) -> str:
    """What a model's states depend on: its name, its weight files (size and time) and the prompts."""
    import hashlib

    digest = hashlib.sha256(name.encode())
    if Path(name).is_dir():
        for f in sorted(Path(name).glob("*.safetensors")):
            digest.update(f"{f.name} {f.stat().st_size} {f.stat().st_mtime_ns}".encode())
    for data in (train, held):
        for side in ("collected", "edited"):
            for prompt in data[side]:
                digest.update(json.dumps([prompt.messages, prompt.tools], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def model_states(name: str, train: dict, held: dict, cache_dir: Path) -> dict[str, Any]:
    """Hidden states and P(search again) at every prompt of the four parts, kept in `cache_dir` (the
    forward passes cost minutes a model on CPU; the readouts seconds)."""
    import gc

    import numpy as np

    from executor_sft.llm.transformers_backend import load_model

    path = cache_dir / f"{states_key(name, train, held)}.npz"
    if path.is_file():
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}
    model, tokenizer = load_model(name)
    data = {"train": train, "held": held}
    out = {}
    for part, which, side in PARTS:
        out[part], p = prompt_states(model, tokenizer, data[which][side], progress=part)
        out[f"p_{part}"] = np.asarray(p)
    del model
    gc.collect()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(path)
    return out


def half_pairs(x_pairs: tuple, train: dict, x_held: tuple, held: dict, draws: int = 10) -> dict[str, Any]:
    """The pairs readout fitted on half the train split's pairs, drawn at random `draws` times: as many
    prompts as the readout fitted as collected, so a difference between the two is the pairing's, not
    the count's. The mean and range of its held-out pair accuracy over the draws."""
    import random

    import numpy as np

    n = len(train["missed"])
    rng, accs = random.Random(0), []
    for _ in range(draws):
        pick = sorted(rng.sample(range(n), n // 2))
        fit = readout(
            np.r_[x_pairs[0][pick], x_pairs[1][pick]],
            [*(train["missed"][i] for i in pick), *(not train["missed"][i] for i in pick)],
            [*(train["subjects"][i] for i in pick)] * 2,
            x_held,
            held,
        )
        accs.append(fit["pair_accuracy"]["value"])
    return {
        "prompts": 2 * (n // 2),
        "draws": draws,
        "mean": statistics.fmean(accs),
        "min": min(accs),
        "max": max(accs),
    }


def model_figures(states: dict[str, Any], train: dict, held: dict) -> dict[str, Any]:
    """The readouts at each layer and the model's own pair accuracy, from `model_states`."""
    import numpy as np

    p_collected, p_edited = list(states["p_held_collected"]), list(states["p_held_edited"])
    missed = held["missed"]
    out: dict[str, Any] = {
        "policy": {
            "pair_accuracy": pair_accuracy(pair_wins(p_collected, p_edited, missed), held["subjects"]),
            "p_search_miss": statistics.fmean(
                c if m else e for c, e, m in zip(p_collected, p_edited, missed, strict=True)
            ),
            "p_search_hit": statistics.fmean(
                e if m else c for c, e, m in zip(p_collected, p_edited, missed, strict=True)
            ),
        }
    }
    for li, layer in enumerate(LAYERS):
        tc, te = states["train_collected"][:, li], states["train_edited"][:, li]
        x_held = (states["held_collected"][:, li], states["held_edited"][:, li])
        out[layer] = {
            "fit_on_pairs": readout(
                np.r_[tc, te],
                [*train["missed"], *(not m for m in train["missed"])],
                [*train["subjects"], *train["subjects"]],
                x_held,
                held,
            ),
            "fit_on_half_pairs": half_pairs((tc, te), train, x_held, held),
            "fit_as_collected": readout(tc, train["missed"], train["subjects"], x_held, held),
        }
    return out


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def _iv(f: dict) -> str:
    if f["low"] is None:
        return f"{f['value']:.3f}"
    if f["low"] == f["high"]:
        return f"{f['value']:.3f} [exactly {f['low']:.3f}]"
    return f"{f['value']:.3f} [{f['low']:.3f}, {f['high']:.3f}]"


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Can the student's model read its first results? A linear readout on paired prompts",
        "",
        f"Command: `{results['command']}`. Load average at the end: {results['load_average']}.",
        "",
        "Pairs of the teacher's turn-2 prompts that differ only in the first results (as collected, and "
        "edited: the gold passage put first where it was missing, swapped for a same-worded namesake where it "
        "was shown); the sub-query is the same within a pair. Pair accuracy: the share of held-out pairs whose "
        "miss member scores above its hit member (0.5 is chance), 95% interval over subject entities. "
        "Readouts: logistic regression on the frozen model's last-token hidden state, L2 by 5-fold "
        "cross-validation over entities; fitted on the train split's pairs (is the distinction there?), on "
        "half of them drawn at random 10 times (as many prompts as the next; mean and range), or on its "
        "prompts as collected (does data shaped like training rows find it?). Policy: the model's own "
        "P(search again).",
        "",
    ]
    for seed, s in results["seeds"].items():
        lines += [
            f"## Seed {seed}",
            "",
            f"Train split: {s['train_pairs']} pairs ({s['train_missed']} whose collected prompt misses the gold "
            f"passage). Held out: {s['held_pairs']} pairs ({s['held_missed']} missing), {s['held_entities']} "
            "subject entities.",
            "",
            "| model | layer | readout fitted on pairs: pair acc. | balanced acc. | on half the pairs: pair acc. "
            "| readout fitted as collected: pair acc. | balanced acc. | policy: pair acc. | P(search again) "
            "miss / hit |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, f in s["models"].items():
            pol = f["policy"]
            for layer in LAYERS:
                fp, fc = f[layer]["fit_on_pairs"], f[layer]["fit_as_collected"]
                half = f[layer]["fit_on_half_pairs"]
                first = layer == LAYERS[0]
                lines.append(
                    f"| {name if first else ''} | {layer} | {_iv(fp['pair_accuracy'])} | "
                    f"{fp['balanced_accuracy']:.3f} | {half['mean']:.3f} ({half['min']:.3f} to {half['max']:.3f}) | "
                    f"{_iv(fc['pair_accuracy'])} | {fc['balanced_accuracy']:.3f} | "
                    + (
                        f"{_iv(pol['pair_accuracy'])} | {pol['p_search_miss']:.3g} / {pol['p_search_hit']:.3g} |"
                        if first
                        else " | |"
                    )
                )
        lines.append("")
    return "\n".join(lines)


def models_of(seed_dir: Path, base: str) -> dict[str, str]:
    """The base model and every trained student kept under a seed folder, by the name shown."""
    variants = {"c": "(c) full filter", "m": "(a') matched control", "a": "(a) naive"}
    out = {BASE: base}
    for v, label in variants.items():
        ckpt = seed_dir / f"variant-{v}" / "student-sft"
        if (ckpt / "config.json").is_file():
            out[label] = str(ckpt)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the --out folder of bench/demo_ablation_decoupled.py")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--models", nargs="+", help="names shown in the report to compute (default: all found)")
    p.add_argument("--base", default="offline:smollm2", help="the untrained student")
    p.add_argument("--done_dir", default=str(DONE_DIR))
    p.add_argument("--results", default=str(RESULTS), help="markdown; the JSON beside it")
    a = p.parse_args(argv)
    for seed in a.seeds:
        for need in (
            Path(a.out) / f"seed{seed}" / "rollouts.jsonl",
            Path(a.done_dir) / f"seed{seed}-world.json",
        ):
            if not need.is_file():
                print(
                    f"error: {need}: missing; run `python bench/demo_ablation_decoupled.py --prepare_only "
                    f"--out {a.out} --seeds {seed}` first",
                    file=sys.stderr,
                )
                return 2
    results_path = Path(a.results)
    earlier = (
        json.loads(results_path.with_suffix(".json").read_text())
        if results_path.with_suffix(".json").is_file()
        else {}
    )
    seeds: dict[str, Any] = {}
    for seed in a.seeds:
        seed_dir = Path(a.out) / f"seed{seed}"
        world_file = json.loads((Path(a.done_dir) / f"seed{seed}-world.json").read_text(encoding="utf-8"))
        train, held = seed_pairs(seed_dir, world_file)
        kept = earlier.get("seeds", {}).get(str(seed), {}).get("models", {})
        s: dict[str, Any] = {
            "train_pairs": len(train["missed"]),
            "train_missed": sum(train["missed"]),
            "held_pairs": len(held["missed"]),
            "held_missed": sum(held["missed"]),
            "held_entities": len(set(held["subjects"])),
            "models": {},
        }
        for label, name in models_of(seed_dir, a.base).items():
            if a.models is None or label in a.models:
                t = time.perf_counter()
                states = model_states(name, train, held, seed_dir / "readout")
                s["models"][label] = {**model_figures(states, train, held), "name": name}
                f = s["models"][label]
                log(
                    f"seed {seed}, {label}: middle layer, fitted on pairs {f['middle']['fit_on_pairs']['pair_accuracy']['value']:.3f}"
                    f", on half the pairs {f['middle']['fit_on_half_pairs']['mean']:.3f}"
                    f", as collected {f['middle']['fit_as_collected']['pair_accuracy']['value']:.3f}"
                    f"; policy {f['policy']['pair_accuracy']['value']:.3f} ({time.perf_counter() - t:.0f}s)"
                )
            elif label in kept:
                s["models"][label] = kept[label]
        seeds[str(seed)] = s
    results = {**provenance("bench/decoupled_readout.py", argv), "seeds": seeds}
    write_results(results_path, results, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
