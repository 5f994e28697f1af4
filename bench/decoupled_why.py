"""Why a student of the decoupled ablation does or does not search again: rows, rule or capacity.

    python bench/decoupled_why.py --out /work/decoupled_runs

Reads the finished units of `bench/demo_ablation_decoupled.py` under `--out` (the teacher's rollouts,
each variant's rows and its kept checkpoint) and measures, per seed:

1. **Rows.** The teacher's correct two-search runs, split by their one-search re-run (failed: the
   second search was needed; correct: it was not), as runs and as distinct trajectories; the person
   sub-queries of the train split whose first search misses the gold passage; and per variant its
   rows, two-search rows and how many of those were needed.
2. **What the one-search rows teach.** Where the gold passage sits in the first results (Doc 1, 2,
   3 or missing) of every variant's one-search rows, beside the held-out sub-queries' first results
   and the share of the student's held-out answers that are a string of its first results' Doc 1.
3. **What the trained policy ranks.** P(search again) at the teacher's held-out turn-2 prompts (the
   edited-prompt probe's prompts as collected, `bench.probing.probe`) and its AUC between prompts whose
   first results miss the gold passage and prompts that hold it: 0.5 is no signal, whatever the
   probabilities' scale, so a policy that ranks misses above hits but never crosses 0.5 shows here.
   The same at the train split's prompts tells a policy that memorised its rows from one that never
   learnt to search again.
4. **What the representation holds.** A logistic probe on the frozen model's last-token hidden state at
   those prompts (middle and last layer), fitted on the train split's turn-2 prompts and scored by
   balanced accuracy on the held-out ones, for the untrained base model and for each checkpoint.

AUC and balanced accuracy carry 95% intervals from resampling subject entities (all their prompts).
Writes `--results`.{md,json}, for every seed with a world file (or `--seeds`). A rerun after another
unit finishes reuses the figures of checkpoints whose weights and prompts have not changed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]

from bench.probing.readout import (  # noqa: E402
    balanced_accuracy,
    by_entity_interval,
    fit_logistic,
    heldout_prompts,
    hidden_states,
    train_prompts,
)
from bench.probing.results import provenance, write_results  # noqa: E402

RESULTS = REPO / "bench" / "results" / "demo_ablation_decoupled_why"
VARIANTS = {"c": "(c) full filter", "m": "(a') matched control", "a": "(a) naive"}
FIGURES = "checkpoint figures v2"  # change it when checkpoint_figures measures differently
_DOC = re.compile(r"^Doc (\d+) \(Title: [^)]*\) ", re.M)


def log(msg: str) -> None:
    print(f"[why] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# 1-2: rows, from the files
# ------------------------------------------------------------------------------------------


def teacher_runs(seed_dir: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """(original runs by id, counterfactual re-runs by the id of the run they re-ran)."""
    from executor_sft.files import read_jsonl

    runs, rerun = {}, {}
    for ep in read_jsonl(seed_dir / "rollouts.jsonl"):
        for r in ep["runs"]:
            r["_gold"] = _gold_of(ep["question"], r["sub_query"])
            if r["counterfactual_of"]:
                rerun[r["counterfactual_of"]] = r
            else:
                runs[r["run_id"]] = r
    return runs, rerun


def _gold_of(question: dict, sub_query: str) -> str | None:
    for step in question.get("decomposition") or []:
        if step["question"] == sub_query:
            return step["gold_doc_id"]
    return None


def _correct(run: dict | None) -> bool:
    return bool(run and run.get("outcome") and run["outcome"].get("em") == 1.0)


def gold_position(run: dict) -> str:
    """Where the sub-query's gold passage is in the run's first results: `1`, `2`, `3` or `missing`."""
    ids = run["searches"][0]["doc_ids"] if run["searches"] else []
    return str(ids.index(run["_gold"]) + 1) if run["_gold"] in ids else "missing"


def rows_figures(seed_dir: Path, world_file: dict) -> dict[str, Any]:
    from executor_sft.files import read_jsonl

    runs, rerun = teacher_runs(seed_dir)
    two = [r for r in runs.values() if r["n_searches"] == 2 and _correct(r)]
    needed = [r for r in two if not _correct(rerun.get(r["run_id"]))]
    first_train = world_file["first_searches"]["train"]
    out: dict[str, Any] = {
        "teacher_two_search_correct": {"runs": len(two), "distinct": len({r["sub_query"] for r in two})},
        "needed": {"runs": len(needed), "distinct": len({r["sub_query"] for r in needed})},
        "not_needed": {
            "runs": len(two) - len(needed),
            "distinct": len({r["sub_query"] for r in two} - {r["sub_query"] for r in needed}),
            "gold_position": dict(Counter(gold_position(r) for r in two if r not in needed)),
        },
        "train_person_subqueries": {
            "all": len(first_train),
            "first_search_misses": sum(f["needed"] for f in first_train),
        },
        "variants": {},
    }
    for v in VARIANTS:
        path = seed_dir / f"variant-{v}" / "sft.jsonl"
        if not path.is_file():
            continue
        rows = [runs[r["source_run_id"]] for r in read_jsonl(path)]
        one = [r for r in rows if r["n_searches"] == 1]
        twos = [r for r in rows if r["n_searches"] >= 2]
        out["variants"][v] = {
            "rows": len(rows),
            "two_search": len(twos),
            "two_search_needed": sum(not _correct(rerun.get(r["run_id"])) for r in twos),
            "one_search_gold_position": dict(Counter(gold_position(r) for r in one)),
        }
    return out


def _doc_lines(tool_text: str) -> dict[int, str]:
    parts = _DOC.split(tool_text)
    return {int(parts[i]): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def answers_from_doc1(eval_jsonl: Path) -> dict[str, Any]:
    """Of a student's held-out runs: how many answered a string of their first results' Doc 1, and
    how many of those Doc 1 passages were the gold one (its answer in it)."""
    from executor_sft.files import read_jsonl

    n = from_doc1 = doc1_gold = 0
    for rec in read_jsonl(eval_jsonl):
        tools = [m for m in rec["run"]["messages"] if m["role"] == "tool"]
        answer = (rec["score"].get("answer") or "").strip()
        if not tools or not answer:
            continue
        n += 1
        doc1 = _doc_lines(tools[0]["content"]).get(1, "")
        if answer.lower() in doc1.lower():
            from_doc1 += 1
            doc1_gold += any(g.lower() in doc1.lower() for g in rec["score"]["golden_answers"])
    return {"runs_with_answer": n, "answer_in_doc1": from_doc1, "doc1_holds_gold_answer": doc1_gold}


# ------------------------------------------------------------------------------------------
# 3-4: the checkpoints
# ------------------------------------------------------------------------------------------


def auc(scores: list[float], missed: list[bool]) -> float:
    """P(a miss prompt scores above a hit prompt), ties counting half."""
    pos = [s for s, m in zip(scores, missed, strict=True) if m]
    neg = [s for s, m in zip(scores, missed, strict=True) if not m]
    if not pos or not neg:
        return float("nan")
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def fingerprint(name: str, train: tuple, held: tuple) -> str:
    """What a checkpoint's figures depend on: its weights (or the offline model's name) and the
    prompts with their labels and subjects, so a rerun reuses figures only for the same inputs."""
    import hashlib

    digest = hashlib.sha256(f"{FIGURES}\n".encode())
    weights = sorted(Path(name).glob("*.safetensors")) if Path(name).is_dir() else []
    if not weights:
        digest.update(name.encode())
    for path in weights:
        with path.open("rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
    for prompts, missed, subjects in (train, held):
        for prompt, m, subject in zip(prompts, missed, subjects, strict=True):
            digest.update(json.dumps([prompt.messages, prompt.tools, m, subject], sort_keys=True).encode())
    return digest.hexdigest()


def checkpoint_figures(
    name: str, train: tuple, held: tuple, earlier: dict[str, Any] | None = None
) -> dict[str, Any]:
    """P(search again) and the probes for one checkpoint; `earlier` figures with the same
    fingerprint are reused (each checkpoint costs minutes on CPU)."""
    key = fingerprint(name, train, held)
    if earlier and earlier.get("fingerprint") == key:
        log(f"{name}: reusing its figures (same weights and prompts)")
        return earlier
    from bench.probing.probe import p_search_each
    from executor_sft.llm.transformers_backend import load_model

    t = time.perf_counter()
    model, tokenizer = load_model(name)
    out: dict[str, Any] = {}
    p = p_search_each(model, tokenizer, held[0])
    out["p_search"] = {
        "miss_mean": statistics.fmean(x for x, m in zip(p, held[1], strict=True) if m),
        "hit_mean": statistics.fmean(x for x, m in zip(p, held[1], strict=True) if not m),
        "auc": by_entity_interval(auc, p, held[1], held[2]),
        "per_prompt": p,
    }
    q = p_search_each(model, tokenizer, train[0])  # prompts the training rows may hold: memorised?
    out["p_search_train"] = {
        "miss_mean": statistics.fmean(x for x, m in zip(q, train[1], strict=True) if m),
        "hit_mean": statistics.fmean(x for x, m in zip(q, train[1], strict=True) if not m),
        "auc": auc(q, train[1]),
    }
    x_train, x_held = hidden_states(model, tokenizer, train[0]), hidden_states(model, tokenizer, held[0])
    for layer, label in ((0, "middle"), (1, "last")):
        score = fit_logistic(x_train[:, layer], train[1])
        pred = [bool(v > 0) for v in score(x_held[:, layer])]
        out[f"probe_{label}"] = by_entity_interval(balanced_accuracy, pred, held[1], held[2])
    out["seconds"] = time.perf_counter() - t
    out["fingerprint"] = key
    log(
        f"{name}: AUC {out['p_search']['auc']['value']:.3f}, probe last {out['probe_last']['value']:.3f} ({out['seconds']:.0f}s)"
    )
    return out


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def _iv(f: dict) -> str:
    if f["low"] is None:
        return f"{f['value']:.3f}"
    return f"{f['value']:.3f} ({f['low']:.3f} to {f['high']:.3f})"


def _positions(counts: dict[str, int]) -> str:
    return ", ".join(
        f"{'Doc ' + k if k != 'missing' else 'missing'}: {counts[k]}"
        for k in ("1", "2", "3", "missing")
        if k in counts
    )


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Why the decoupled ablation's students search again or not: rows, the filter's rule, capacity",
        "",
        f"Command: `{results['command']}`. Load average at the end: {results['load_average']}.",
        "",
    ]
    for seed, s in results["seeds"].items():
        r = s["rows"]
        lines += [
            f"## Seed {seed}",
            "",
            "### Rows",
            "",
            f"- Train split: {r['train_person_subqueries']['all']} distinct person sub-queries; the teacher's "
            f"first search misses the gold passage on {r['train_person_subqueries']['first_search_misses']}.",
            f"- The teacher's correct two-search runs: {r['teacher_two_search_correct']['runs']} "
            f"({r['teacher_two_search_correct']['distinct']} distinct sub-queries). The one-search re-run failed "
            f"(second search needed) on {r['needed']['runs']} ({r['needed']['distinct']} distinct) and was correct "
            f"on {r['not_needed']['runs']} ({r['not_needed']['distinct']} distinct); where the gold passage sat in "
            f"their first results: {_positions(r['not_needed']['gold_position'])}.",
            "",
            "| variant | rows | two-search rows | of which needed | one-search rows: gold at Doc 1 / 2 / 3 / missing "
            "| held-out answers taken from Doc 1 (of which Doc 1 held the gold answer) |",
            "|---|---|---|---|---|---|",
        ]
        for v, f in r["variants"].items():
            pos = f["one_search_gold_position"]
            d1 = s["answers"].get(v)
            d1s = (
                f"{d1['answer_in_doc1']} of {d1['runs_with_answer']} ({d1['doc1_holds_gold_answer']})"
                if d1
                else "-"
            )
            lines.append(
                f"| {VARIANTS[v]} | {f['rows']} | {f['two_search']} | {f['two_search_needed']} | "
                f"{pos.get('1', 0)} / {pos.get('2', 0)} / {pos.get('3', 0)} / {pos.get('missing', 0)} | {d1s} |"
            )
        held = s["heldout_prompts"]
        lines += [
            "",
            f"Held-out turn-2 prompts: {held['n']} ({held['missed']} whose first results miss the gold passage), "
            f"{held['entities']} subject entities; train-split prompts for the hidden-state probe: "
            f"{s['train_prompts']['n']} ({s['train_prompts']['missed']} missing).",
            "",
            "### Checkpoints",
            "",
            "| model | mean P(search again): miss / hit | AUC miss vs hit (95%, by entity) "
            "| train-split prompts: P miss / hit, AUC | hidden-state probe, balanced acc.: middle layer "
            "| last layer |",
            "|---|---|---|---|---|---|",
        ]
        for name, f in s["checkpoints"].items():
            ps, pt = f["p_search"], f.get("p_search_train")
            train_cell = f"{pt['miss_mean']:.2e} / {pt['hit_mean']:.2e}, {pt['auc']:.3f}" if pt else "-"
            lines.append(
                f"| {name} | {ps['miss_mean']:.2e} / {ps['hit_mean']:.2e} | {_iv(ps['auc'])} | {train_cell} "
                f"| {_iv(f['probe_middle'])} | {_iv(f['probe_last'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="The --out folder of bench/demo_ablation_decoupled.py.")
    p.add_argument(
        "--seeds", type=int, nargs="+", help="Default: every seed with a world file under --done_dir."
    )
    p.add_argument(
        "--base", default="offline:smollm2", help="The untrained student, for the probe's baseline."
    )
    p.add_argument("--done_dir", default=str(REPO / "bench" / "results" / "demo_ablation_decoupled"))
    p.add_argument("--results", default=str(RESULTS))
    args = p.parse_args(argv)
    out = Path(args.results)
    before = out.with_suffix(".json")
    earlier = json.loads(before.read_text(encoding="utf-8"))["seeds"] if before.is_file() else {}
    seeds: dict[str, Any] = {}
    if args.seeds is None:
        found = (re.fullmatch(r"seed(\d+)-world\.json", f.name) for f in Path(args.done_dir).iterdir())
        args.seeds = sorted(int(m.group(1)) for m in found if m)
    for seed in args.seeds:
        seed_dir = Path(args.out) / f"seed{seed}"
        world_file = json.loads((Path(args.done_dir) / f"seed{seed}-world.json").read_text(encoding="utf-8"))
        train, held = train_prompts(seed_dir), heldout_prompts(seed_dir, world_file)
        s: dict[str, Any] = {
            "rows": rows_figures(seed_dir, world_file),
            "answers": {},
            "train_prompts": {"n": len(train[0]), "missed": sum(train[1])},
            "heldout_prompts": {"n": len(held[0]), "missed": sum(held[1]), "entities": len(set(held[2]))},
            "checkpoints": {},
        }
        had = earlier.get(str(seed), {}).get("checkpoints", {})
        s["checkpoints"]["base (untrained)"] = checkpoint_figures(
            args.base, train, held, had.get("base (untrained)")
        )
        for v in VARIANTS:
            unit = seed_dir / f"variant-{v}"
            if (unit / "student-sft" / "config.json").is_file() and (
                unit / "eval-mean4_t0.6" / "eval.jsonl"
            ).is_file():
                s["answers"][v] = answers_from_doc1(unit / "eval-mean4_t0.6" / "eval.jsonl")
                s["checkpoints"][VARIANTS[v]] = checkpoint_figures(
                    str(unit / "student-sft"), train, held, had.get(VARIANTS[v])
                )
        seeds[str(seed)] = s
    results = {**provenance("bench/decoupled_why.py", argv), "seeds": seeds}
    write_results(out, results, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
