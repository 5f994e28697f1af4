"""The filter's mechanism with the shortcuts closed: (c) against a matched control.

    nohup nice -n 19 python bench/demo_ablation_decoupled.py --out /work/decoupled_runs > run.log 2>&1 &
    python bench/demo_ablation_decoupled.py --done_only      # tables from the finished units only
    python bench/demo_ablation_decoupled.py --prepare_only --out /work/decoupled_runs  # worlds and rollouts only

Per seed, on the decoupled world (`executor_sft.synthetic.DECOUPLED_WORLD`, 600 entities, 400
questions; docs/synthetic.md): the world, its BM25 index and the scripted teacher's rollouts
(`double_check` on, the coin off) are made once, and the two bag-of-words shortcut probes
(`bench.probing.surface`) are measured on its person sub-queries. Then three students
are trained from the same rollouts, each for the same number of optimizer steps (two epochs of
(c)'s rows) on one cosine schedule:

- (c) the full filter (`single_search` + `info_gain_multi_search`);
- (a') the matched control (`bench.probing.matched`): (c)'s one-search rows and
  as many two-search rows, drawn at random from the teacher's correct two-search runs;
- (a) naive: every correct run.

Each is evaluated on every held-out person sub-query under mean@4 at T=0.6: P(second search)
when the first results hold the gold passage and when they miss it, on plain and on ambiguous
sub-queries, with 95% intervals from resampling subject entities (all their runs), EM and tokens.
The edited-prompt probe reads P(search again) at the teacher's turn-2 prompts as collected and
edited on both sides: the gold passage put in first place where the first results missed it, and
the gold passage swapped for a same-worded distractor where they held it. What the rows teach is
counted too: each unit's rows about people by kind, first results and searches, and the student's
P(search again) at those rows' own turn-2 prompts (does it fit the decision it was taught?).

Each (variant, seed) writes `--done_dir`/seed<k>-<v>.json as it finishes (commit it); a rerun skips
units whose done file exists with the same key, and a killed training resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.probing` from any folder

REPO = Path(__file__).resolve().parents[1]
DONE_DIR = REPO / "bench" / "results" / "demo_ablation_decoupled"
RESULTS = REPO / "bench" / "results" / "demo_ablation_decoupled.md"
VARIANTS = {"c": "(c) full filter", "m": "(a') matched control", "a": "(a) naive"}
FIGURES = (
    ("all_hit", "all, first results hold gold"),
    ("all_miss", "all, first results miss gold"),
    ("plain_hit", "plain, first results hold gold"),
    ("plain_miss", "plain, first results miss gold"),
    ("amb_hit", "ambiguous, hold gold"),
    ("amb_miss", "ambiguous, miss gold"),
)
ENTITIES, QUESTIONS, EPOCHS_OF_C, SAVE_EVERY, RESAMPLES = 600, 400, 2, 16, 10_000
# Above the longest row (1,333 tokens on seed 0), so the SFT fit shortens no row: at 1024 it
# shortened the first results of every two-search row and of no one-search row, and the students
# learnt the cut's mark instead of the filter (bench/results/truncation_cue.md).
MAX_LENGTH = 2048


def log(msg: str) -> None:
    print(f"[decoupled] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def _load(path: Path, key: dict) -> dict | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if data.get("key") == json.loads(json.dumps(key)) else None


def world_options(test_share: float | None = None) -> dict:
    """`write_world`'s options: `DECOUPLED_WORLD`, with another held-out share where given."""
    from executor_sft.synthetic import DECOUPLED_WORLD

    return DECOUPLED_WORLD if test_share is None else {**DECOUPLED_WORLD, "test_share": test_share}


def seed_config(args, seed: int):
    from executor_sft.demos.demo import load_config

    return load_config(
        args.config,
        {
            "seed": seed,
            "out": str(Path(args.out) / f"seed{seed}"),
            "entities": getattr(args, "entities", ENTITIES),
            "questions": getattr(args, "questions", QUESTIONS),
            "teacher_extra_search_rate": 0.0,
            "student_questions": 0,
            "eval_samples": 4,
            "eval_temperature": 0.6,
            "max_length": MAX_LENGTH,
        },
    )


def _key(cfg, world: dict, drop: tuple[str, ...] = ("out",)) -> dict:
    return {"config": {k: v for k, v in cfg.model_dump().items() if k not in drop}, "world": world}


def _world_key(cfg, world: dict) -> dict:
    """The key of what precedes training (world, rollouts, steps): the SFT fit's length is not in it."""
    return _key(cfg, world, drop=("out", "max_length"))


def check_whole(rows: list[dict], cfg) -> int:
    """The longest row's tokens; exits if the fit at `cfg.max_length` would shorten any row."""
    from executor_sft.llm.backends import load_tokenizer
    from executor_sft.sft.length import fit_row

    tokenizer = load_tokenizer(cfg.model)
    lengths = [len(fit_row(r, tokenizer, None).example["input_ids"]) for r in rows]
    if (over := sum(n > cfg.max_length for n in lengths)) > 0:
        raise SystemExit(
            f"{over} of {len(rows)} rows exceed max_length={cfg.max_length} (longest {max(lengths)}): "
            "a shortened row is a cue (bench/results/truncation_cue.md); raise MAX_LENGTH"
        )
    return max(lengths)


# ------------------------------------------------------------------------------------------
# per seed: world, rollouts, shortcut probes, teacher reference
# ------------------------------------------------------------------------------------------


def prepare(cfg, options: dict, done_dir: Path) -> dict:
    """World, index, rollouts, shortcut probes and the teacher's greedy evaluation (resumable)."""
    from bench.probing.surface import first_searches, shortcut_accuracy
    from executor_sft.demos.demo import collect_demo, evaluate
    from executor_sft.demos.sample_data import ROLLOUTS, bm25_index
    from executor_sft.synthetic import ScriptedTeacherExecutor, load_world, write_world

    out = Path(cfg.out)
    world_dir = out / "world"
    marker = out / "prepared.json"
    if _load(marker, _world_key(cfg, options)) is None or not (out / ROLLOUTS).is_file():
        t = time.perf_counter()
        world = write_world(world_dir, cfg.seed, cfg.entities, cfg.questions, **options)
        retriever, index_dir = bm25_index(world_dir / "corpus.jsonl", out / "index")
        episodes = collect_demo(cfg, out, world, retriever, index_dir, False, teacher_double_check=True)
        log(f"seed {cfg.seed}: world, index and {episodes} episodes in {time.perf_counter() - t:.0f}s")
        _save(
            marker,
            {"key": _world_key(cfg, options), "episodes": episodes, "seconds": time.perf_counter() - t},
        )
    world = load_world(world_dir)
    retriever, index_dir = bm25_index(world_dir / "corpus.jsonl", out / "index")
    train_rows, test_rows = (person_rows(world_dir / f"subqueries_{s}.jsonl") for s in ("train", "test"))
    first_train = first_searches(world, retriever, train_rows, cfg.top_k)
    first_test = first_searches(world, retriever, test_rows, cfg.top_k)
    teacher_runs = out / "ref-teacher" / "eval.jsonl"
    subs = eval_subqueries(world_dir)
    if not teacher_runs.is_file():
        greedy = cfg.model_copy(update={"eval_samples": 1, "eval_temperature": 0.0})
        evaluate(
            greedy, ScriptedTeacherExecutor(world), retriever, subs, "scripted teacher", teacher_runs, False
        )
    seed_file = {
        "key": _key(cfg, options),
        "seed": cfg.seed,
        "world": world.meta.get("stats", {}),
        "shortcuts": shortcut_accuracy(first_train, first_test),
        "bare_test": sorted(r["id"] for r in test_rows if not r.get("descriptor")),
        "first_searches": {
            "train": [vars(f) for f in first_train],
            "test": [vars(f) for f in first_test],
        },
        "teacher": compact_runs(teacher_runs, subs, world_dir),
    }
    _save(done_dir / f"seed{cfg.seed}-world.json", seed_file)
    log(f"seed {cfg.seed}: shortcut probes {seed_file['shortcuts']}")
    return {
        "options": options,
        "world": world,
        "retriever": retriever,
        "subs": subs,
        "teacher_runs": teacher_runs,
        "first_train": first_train,
    }


def person_rows(path: Path) -> list[dict]:
    from executor_sft.files import read_jsonl
    from executor_sft.synthetic.relations import PERSON_RELATIONS

    return [r for r in read_jsonl(path) if r["relation"] in PERSON_RELATIONS]


def eval_subqueries(world_dir: Path) -> list:
    """Every held-out sub-query about a person (plain and ambiguous)."""
    from executor_sft.eval.executor_eval import load_subqueries

    path = world_dir / "subqueries_test.jsonl"
    people = {r["id"] for r in person_rows(path)}
    return [q for q in load_subqueries(path) if q.id in people]


def compact_runs(runs_path: Path, subs: list, world_dir: Path) -> list[dict]:
    """Per run: subject, type, whether the first results hold gold, searches, EM, tokens."""
    by_id = {q.id: q for q in subs}
    rows = {r["id"]: r for r in person_rows(world_dir / "subqueries_test.jsonl")}
    out = []
    for line in runs_path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        score, searches = rec["score"], rec["run"]["searches"]
        q = by_id[score["id"]]
        gold = set(q.positive_doc_ids or [])
        out.append(
            {
                "id": q.id,
                "subject": rows[q.id]["subject_id"],
                "ambiguous": rows[q.id]["type"] != "single_hop",
                "hit": bool(searches) and bool(set(searches[0]["doc_ids"]) & gold),
                "searches": score["n_searches"],
                "em": float(score["em"]),
                "tokens": score["tokens"],
            }
        )
    return out


ROW_KINDS = tuple(
    f"{kind}_{first}_{n}" for kind in ("plain", "amb") for first in ("hit", "miss") for n in (1, 2)
)
"""A trained row about a person: sub-query kind, whether the teacher's first results held the gold
passage, and the searches the row makes (1 or 2)."""


def _rows_about_people(rows: list[dict], world_dir: Path, first_train: list) -> list[tuple[str, str, dict]]:
    """(kind, first results, row) of each trained row about a person: `plain` or `amb`, and `hit`
    or `miss` by the teacher's first search for the row's sub-query."""
    kinds = {
        r["question"]: "plain" if r["type"] == "single_hop" else "amb"
        for r in person_rows(world_dir / "subqueries_train.jsonl")
    }
    missed = {f.sub_query: f.needed for f in first_train}
    out = []
    for row in rows:
        asked = next(m["content"] for m in row["messages"] if m["role"] == "user")
        if asked in kinds:
            out.append((kinds[asked], "miss" if missed[asked] else "hit", row))
    return out


def row_makeup(rows: list[dict], world_dir: Path, first_train: list) -> dict[str, int]:
    """How many of the trained rows about people fall in each of `ROW_KINDS`: what the rows can
    teach about when to search again (the held-out evaluation asks only about people)."""
    from bench.probing.matched import n_searches

    counts = dict.fromkeys(ROW_KINDS, 0)
    for kind, first, row in _rows_about_people(rows, world_dir, first_train):
        counts[f"{kind}_{first}_{min(n_searches(row), 2)}"] += 1
    return counts


def fit_probe(ckpt: Path, rows: list[dict], world_dir: Path, first_train: list) -> dict:
    """Mean P(search again) at the turn-2 prompts of the unit's own trained rows about people, where
    the first results miss and where they hold the gold passage: whether the student fits the
    decisions it was taught, beside the held-out probe's whether it carries them to new people.
    The same rows edited as the edited-prompt probe edits (`edit_first_results`) tell a student that
    reads the passages from one that recalls each trained sub-query's decision: a reader's
    P(search again) follows the edit, a recaller's stays."""
    from bench.probing.edit import edit_first_results
    from bench.probing.probe import Turn2Prompt, p_search_each
    from executor_sft.llm.transformers_backend import load_model
    from executor_sft.synthetic import load_world

    world = load_world(world_dir)
    golds = {
        r["question"]: r["positive_doc_ids"][0] for r in person_rows(world_dir / "subqueries_train.jsonl")
    }
    sides, prompts, edits = [], [], []
    for kind, first, row in _rows_about_people(rows, world_dir, first_train):
        second = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"][1]
        messages = row["messages"][:second]
        sides.append(first)
        prompts.append(Turn2Prompt(kind, messages, row.get("tools")))
        asked = next(m["content"] for m in messages if m["role"] == "user")
        edit = edit_first_results(world, messages, golds[asked])
        if edit is not None:
            edits.append((len(prompts) - 1, edit[0], Turn2Prompt(kind, edit[1], row.get("tools"))))
    model, tokenizer = load_model(str(ckpt))
    probs = p_search_each(model, tokenizer, prompts)
    edited = p_search_each(model, tokenizer, [e[2] for e in edits])
    del model
    gc.collect()

    def mean(values: list[float]) -> float | None:
        return statistics.mean(values) if values else None

    out = {}
    for side in ("miss", "hit"):
        got = [p for p, s in zip(probs, sides, strict=True) if s == side]
        mine = [(probs[i], after) for (i, s, _), after in zip(edits, edited, strict=True) if s == side]
        out[side] = {
            "n": len(got),
            "p": mean(got),
            "n_edited": len(mine),
            "as_collected": mean([b for b, _ in mine]),
            "edited": mean([a for _, a in mine]),
        }
    return out


def add_row_figures(done: dict, var_dir: Path, world_dir: Path, first_train: list) -> bool:
    """Give a unit finished before `person_rows` and `fit_probe` (with its edited rows) existed both,
    from its rows and kept checkpoint; whether anything was added."""
    from executor_sft.files import read_jsonl

    rows_path, ckpt = var_dir / "sft.jsonl", var_dir / "student-sft"
    if not rows_path.is_file():
        return False
    rows = read_jsonl(rows_path)
    added = False
    if "person_rows" not in done:
        done["person_rows"] = row_makeup(rows, world_dir, first_train)
        added = True
    if "edited" not in done.get("fit_probe", {}).get("miss", {}) and (ckpt / "config.json").is_file():
        done["fit_probe"] = fit_probe(ckpt, rows, world_dir, first_train)
        added = True
    return added


# ------------------------------------------------------------------------------------------
# per (variant, seed): rows, training, evaluation, the edited-prompt probe
# ------------------------------------------------------------------------------------------


def variant_rows(variant: str, out: Path, seed: int) -> list[dict]:
    from bench.probing.matched import matched_control
    from executor_sft.demos.sample_data import ROLLOUTS
    from executor_sft.filters import ALL_CORRECT, FilterConfig, filter_episodes, iter_episodes_by_id

    full = filter_episodes(iter_episodes_by_id(out / ROLLOUTS), FilterConfig()).rows
    if variant == "c":
        return full
    naive = filter_episodes(iter_episodes_by_id(out / ROLLOUTS), FilterConfig(strata=[ALL_CORRECT])).rows
    return naive if variant == "a" else matched_control(full, naive, seed)


def steps_for(cfg, options: dict) -> int:
    """Two epochs of (c)'s rows: every variant trains this many steps (kept in `steps.json`)."""
    path = Path(cfg.out) / "steps.json"
    if (done := _load(path, _world_key(cfg, options))) is not None:
        return done["steps"]
    n = len(variant_rows("c", Path(cfg.out), cfg.seed))
    steps = EPOCHS_OF_C * math.ceil(n / (cfg.batch_size * cfg.grad_accum))
    _save(path, {"key": _world_key(cfg, options), "c_rows": n, "steps": steps})
    return steps


def run_unit(variant: str, cfg, prep: dict, steps: int, done_dir: Path) -> dict:
    from bench.probing.convergence import EqualStepsConfig
    from bench.probing.matched import n_searches
    from executor_sft.demos.demo import _student_model, evaluate, train_demo
    from executor_sft.filters import write_jsonl

    key = {**_key(cfg, prep["options"]), "variant": variant, "steps": steps}
    done_path = done_dir / f"seed{cfg.seed}-{variant}.json"
    out = Path(cfg.out)
    var_dir = out / f"variant-{variant}"
    if (done := _load(done_path, key)) is not None:
        log(f"seed {cfg.seed} ({variant}): done file found; skipped")
        if add_row_figures(done, var_dir, out / "world", prep["first_train"]):
            _save(done_path, done)
        return done
    ckpt = var_dir / "student-sft"
    seconds: dict[str, float] = {}
    rows = variant_rows(variant, out, cfg.seed)
    var_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(var_dir / "sft.jsonl", rows)
    longest = check_whole(rows, cfg)
    trained = _load(var_dir / "trained.json", key)
    if trained is None:
        if _load(var_dir / "training.json", key) is None:
            import shutil

            shutil.rmtree(ckpt, ignore_errors=True)
            _save(var_dir / "training.json", {"key": key})
        log(f"seed {cfg.seed} ({variant}): training {steps} steps on {len(rows)} rows")
        t = time.perf_counter()
        conv = EqualStepsConfig(max_steps=steps, epochs=EPOCHS_OF_C, probe_every=SAVE_EVERY, heldout_rows=0)
        train = train_demo(cfg, var_dir / "sft.jsonl", ckpt, convergence=conv)
        metrics = {k: v for k, v in train.metrics.items() if isinstance(v, int | float)}
        trained = {"key": key, "metrics": metrics, "seconds": time.perf_counter() - t}
        _save(var_dir / "trained.json", trained)
        for folder in ckpt.glob("checkpoint-*"):
            shutil_rm(folder)
    seconds["train"] = trained["seconds"]
    runs = var_dir / "eval-mean4_t0.6" / "eval.jsonl"
    t = time.perf_counter()
    log(f"seed {cfg.seed} ({variant}): evaluating mean@4, T=0.6 on {len(prep['subs'])} sub-queries")
    model = _student_model(cfg, str(ckpt))
    evaluate(cfg, model, prep["retriever"], prep["subs"], f"{cfg.model} SFT {VARIANTS[variant]}", runs)
    model.close()
    del model
    gc.collect()  # the evaluation's prefix cache (GBs) before the probe loads the model again
    seconds["eval"] = time.perf_counter() - t
    t = time.perf_counter()
    probe = edited_probe(ckpt, prep)
    fit = fit_probe(ckpt, rows, out / "world", prep["first_train"])
    seconds["probe"] = time.perf_counter() - t
    strata: dict[str, int] = {}
    for r in rows:
        strata[r["stratum"]] = strata.get(r["stratum"], 0) + 1
    result = {
        "key": key,
        "seed": cfg.seed,
        "variant": variant,
        "steps": trained["metrics"].get("global_step", steps),
        "rows": len(rows),
        "two_search_rows": sum(n_searches(r) >= 2 for r in rows),
        "longest_row_tokens": longest,
        "strata": strata,
        "person_rows": row_makeup(rows, out / "world", prep["first_train"]),
        "train_metrics": trained["metrics"],
        "runs": compact_runs(runs, prep["subs"], out / "world"),
        "probe": probe,
        "fit_probe": fit,
        "seconds": seconds,
    }
    _save(done_path, result)
    log(f"seed {cfg.seed} ({variant}): done -> {done_path}")
    return result


def shutil_rm(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def edited_prompts(prep: dict) -> list[tuple[str, Any, Any]]:
    """(side, as collected, edited) turn-2 prompts of the teacher on the held-out sub-queries."""
    from dataclasses import replace

    from bench.probing.edit import edit_first_results
    from bench.probing.probe import turn2_prompts

    subs = {q.id: q for q in prep["subs"]}
    out = []
    for prompt in turn2_prompts(prep["teacher_runs"]):
        q = subs.get(prompt.id)
        if q is None:
            continue
        edit = edit_first_results(prep["world"], prompt.messages, q.positive_doc_ids[0])
        if edit is not None:
            out.append((edit[0], prompt, replace(prompt, messages=edit[1])))
    return out


def edited_probe(ckpt: Path, prep: dict) -> dict:
    """Mean P(search again) per side, as collected and edited."""
    from bench.probing.probe import p_search_each
    from executor_sft.llm.transformers_backend import load_model

    triples = edited_prompts(prep)
    model, tokenizer = load_model(str(ckpt))
    before = p_search_each(model, tokenizer, [t[1] for t in triples])
    after = p_search_each(model, tokenizer, [t[2] for t in triples])
    del model
    gc.collect()
    out = {}
    for side in ("miss", "hit"):
        idx = [i for i, t in enumerate(triples) if t[0] == side]
        out[side] = {
            "n": len(idx),
            "as_collected": statistics.mean(before[i] for i in idx) if idx else None,
            "edited": statistics.mean(after[i] for i in idx) if idx else None,
        }
    return out


# ------------------------------------------------------------------------------------------
# figures and report
# ------------------------------------------------------------------------------------------


def _subset(runs: list[dict], figure: str) -> list[dict]:
    """The runs a figure is over: `all`, `plain` or `amb`(iguous) sub-queries whose first results
    hold (`hit`) or miss (`miss`) the gold passage."""
    kind, side = figure.split("_")
    return [
        r
        for r in runs
        if (kind == "all" or r["ambiguous"] == (kind == "amb")) and r["hit"] == (side == "hit")
    ]


def share_with_interval(runs: list[dict], seed: int = 0) -> dict:
    """P(>= 2 searches) over `runs`, with a 95% interval from resampling subject entities (each with
    all its runs); where every resample gives the same share (0 or 1), the exact one-sided 95% bound
    over the n subjects (Clopper-Pearson: 1 - 0.05^(1/n) above 0, 0.05^(1/n) below 1)."""
    if not runs:
        return {"p": None, "n_runs": 0, "n_subjects": 0}
    by_subject: dict[str, list[float]] = {}
    for r in runs:
        by_subject.setdefault(r["subject"], []).append(float(r["searches"] >= 2))
    groups = list(by_subject.values())
    p = sum(map(sum, groups)) / sum(map(len, groups))
    rng = random.Random(seed)
    draws = []
    for _ in range(RESAMPLES):
        pick = [groups[rng.randrange(len(groups))] for _ in groups]
        draws.append(sum(map(sum, pick)) / sum(map(len, pick)))
    draws.sort()
    lo, hi = draws[int(0.025 * RESAMPLES)], draws[int(0.975 * RESAMPLES) - 1]
    out = {"p": p, "ci95": [lo, hi], "n_runs": len(runs), "n_subjects": len(groups)}
    if lo == hi:
        n = len(groups)
        out["exact_bound"] = ["<=", 1 - 0.05 ** (1 / n)] if p == 0 else [">=", 0.05 ** (1 / n)]
    return out


def selectivity(runs: list[dict]) -> float | None:
    """P(>= 2 searches | first results miss gold) - P(>= 2 searches | they hold it): 1 for a student
    that searches again when, and only when, it needs to; None without runs on both sides."""
    miss = [r["searches"] >= 2 for r in runs if not r["hit"]]
    hit = [r["searches"] >= 2 for r in runs if r["hit"]]
    return sum(miss) / len(miss) - sum(hit) / len(hit) if miss and hit else None


def selectivity_gap(c_runs: list[dict], other_runs: list[dict], seed: int = 0) -> dict:
    """(c)'s selectivity minus another variant's on the same held-out sub-queries, with a 95% interval
    from resampling the subject entities (the same draw for both: the runs are paired by subject)."""
    subjects = sorted({r["subject"] for r in c_runs + other_runs})
    c_by = {s: [r for r in c_runs if r["subject"] == s] for s in subjects}
    o_by = {s: [r for r in other_runs if r["subject"] == s] for s in subjects}

    def gap(pick: list[str]) -> float | None:
        a = selectivity([r for s in pick for r in c_by[s]])
        b = selectivity([r for s in pick for r in o_by[s]])
        return None if a is None or b is None else a - b

    point = gap(subjects)
    rng = random.Random(seed)
    draws = sorted(
        d
        for _ in range(RESAMPLES)
        if (d := gap([subjects[rng.randrange(len(subjects))] for _ in subjects])) is not None
    )
    if point is None or not draws:
        return {"gap": point, "n_subjects": len(subjects)}
    lo, hi = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]
    return {"gap": point, "ci95": [lo, hi], "n_subjects": len(subjects), "resamples_used": len(draws)}


def gap_lines(units: list[dict]) -> tuple[list[str], dict]:
    """Per seed, (c)'s selectivity against each control's: the answer to "does (c) search again when,
    and only when, the first results miss, more than (a') does?"."""
    by = {(u["seed"], u["variant"]): u for u in units}
    rows, data = [], {}
    for seed in sorted({s for s, _ in by}):
        c = by.get((seed, "c"))
        for v in ("m", "a"):
            other = by.get((seed, v))
            if c is None or other is None:
                continue
            g = selectivity_gap(c["runs"], other["runs"], seed)
            sel_c, sel_o = selectivity(c["runs"]), selectivity(other["runs"])
            data[f"seed{seed}-c-minus-{v}"] = {"c": sel_c, v: sel_o, **g}
            interval = f"[{100 * g['ci95'][0]:+.1f}, {100 * g['ci95'][1]:+.1f}]" if "ci95" in g else "-"
            rows.append(
                f"| {seed} | {VARIANTS[v]} | {100 * sel_c:+.1f} | {100 * sel_o:+.1f} | "
                f"{100 * g['gap']:+.1f} {interval} | {g['n_subjects']} |"
            )
    if not rows:
        return [], data
    head = [
        "",
        "## Is (c) more selective than its controls?",
        "",
        "Selectivity: P(second search | first results miss gold) - P(second search | they hold it), in points "
        "(100: searches again when, and only when, it must; 0: blind to the first results). Gap: (c) minus the "
        "control on the same held-out sub-queries, 95% interval from resampling the subject entities (paired).",
        "",
        "| seed | control | (c) selectivity | control selectivity | gap (c) - control | subjects |",
        "|---|---|---|---|---|---|",
    ]
    return head + rows, data


def named_lines(units: list[dict], worlds: dict[int, dict]) -> tuple[list[str], dict]:
    """Per unit, selectivity over all held-out runs and over the runs whose sub-query names a
    descriptor: a student that used the descriptor rule (no descriptor, no second search) gains
    selectivity from the bare sub-queries only, which all sit on the hit side."""
    rows, data = [], {}
    for u in units:
        bare = set(worlds.get(u["seed"], {}).get("bare_test", []))
        if not bare:
            continue
        named = [r for r in u["runs"] if r["id"] not in bare]
        sel, sel_named = selectivity(u["runs"]), selectivity(named)
        hit, miss = (
            share_with_interval(_subset(named, f"all_{side}"), u["seed"]) for side in ("hit", "miss")
        )
        data[f"seed{u['seed']}-{u['variant']}"] = {
            "all": sel,
            "named": sel_named,
            "named_hit": hit,
            "named_miss": miss,
        }
        rows.append(
            f"| {u['seed']} | {VARIANTS[u['variant']]} | {_points(sel)} | {_points(sel_named)} | "
            f"{_fmt_share(hit)} | {_fmt_share(miss)} | {len(named)} of {len(u['runs'])} |"
        )
    if not rows:
        return [], data
    head = [
        "",
        "## Selectivity where the sub-query names a descriptor",
        "",
        "The selectivity above, over all held-out runs and over those whose sub-query names a descriptor "
        "(no cue in the sub-query), with P(second search) on the latter's two sides.",
        "",
        "| seed | row | selectivity, all | selectivity, named | P(again), named, hold gold | P(again), named, miss "
        "| runs named |",
        "|---|---|---|---|---|---|---|",
    ]
    return head + rows, data


def _points(share_difference: float | None) -> str:
    return "-" if share_difference is None else f"{100 * share_difference:+.1f}"


def _acc(shortcuts: dict, name: str) -> str:
    """A probe's balanced accuracy, or "-" in a seed file written before the probe existed."""
    return f"{shortcuts[name]:.3f}" if name in shortcuts else "-"


def unit_figures(unit: dict) -> dict:
    runs = unit["runs"]
    figs = {f: share_with_interval(_subset(runs, f), unit["seed"]) for f, _ in FIGURES}
    figs["em"] = statistics.mean(r["em"] for r in runs) if runs else None
    figs["tokens"] = statistics.mean(r["tokens"] for r in runs) if runs else None
    return figs


def _fmt_share(f: dict) -> str:
    if f.get("p") is None:
        return "-"
    text = f"{100 * f['p']:.1f} [{100 * f['ci95'][0]:.1f}, {100 * f['ci95'][1]:.1f}]"
    if "exact_bound" in f:
        op, bound = f["exact_bound"]
        text = f"{100 * f['p']:.1f} ({op} {100 * bound:.1f} exact)"
    return f"{text} ({f['n_runs']} runs, {f['n_subjects']} subj.)"


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    m = statistics.mean(values)
    return f"{m:.1f}" + (f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else "")


def _shown(path: Path) -> str:
    """`path` relative to the repository where it is inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def fit_lines(units: list[dict]) -> list[str]:
    """What the SFT fit did to the rows: whole (the longest row is recorded) or shortened and marked."""
    lengths = sorted({u["key"]["config"]["max_length"] for u in units if "key" in u})
    if not lengths:
        return []
    longest = [u["longest_row_tokens"] for u in units if "longest_row_tokens" in u]
    if len(longest) == len(units):
        how = f"no row shortened (the longest: {max(longest)} tokens)"
    else:
        how = (
            "rows over it had their passage lines shortened, each cut line ending in ` [...]`: every "
            "two-search row and no one-search row on seed 0, a cue the students learnt "
            "([truncation_cue.md](truncation_cue.md))"
        )
    return [f"SFT max_length: {', '.join(map(str, lengths))}; {how}.", ""]


def row_lines(units: list[dict]) -> list[str]:
    """The trained rows about people by kind, first results and searches (units that recorded it)."""
    counted = [u for u in units if "person_rows" in u]
    if not counted:
        return []
    labels = {"plain": "plain", "amb": "ambiguous"}
    lines = [
        "",
        "## What the rows teach (trained rows about people)",
        "",
        "Rows per sub-query kind and the teacher's first results (hold or miss the gold passage), as one "
        "search / two searches. A rule the rows teach exactly: two searches on every miss, one on every hit. "
        "Fit: the trained student's mean P(search again) at the turn-2 prompts of these same rows (the "
        "held-out probe above asks the same of new people).",
        "",
        "| seed | row | "
        + " | ".join(f"{labels[k]}, {f}: 1 / 2" for k in labels for f in ("hit", "miss"))
        + " | two-search rows on a miss | fit: P(search again), miss / hit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for u in counted:
        c = u["person_rows"]
        cells = [f"{c[f'{k}_{f}_1']} / {c[f'{k}_{f}_2']}" for k in labels for f in ("hit", "miss")]
        two = sum(c[f"{k}_{f}_2"] for k in labels for f in ("hit", "miss"))
        on_miss = sum(c[f"{k}_miss_2"] for k in labels)
        fit = u.get("fit_probe")
        fitted = (
            " / ".join(
                "-" if fit[s]["p"] is None else f"{100 * fit[s]['p']:.1f} (n={fit[s]['n']})"
                for s in ("miss", "hit")
            )
            if fit
            else "-"
        )
        lines.append(
            f"| {u['seed']} | {VARIANTS[u['variant']]} | "
            + " | ".join(cells)
            + f" | {on_miss} of {two} | {fitted} |"
        )
    return lines


def edit_table(units: list[dict], field: str, n_key: str) -> list[str]:
    """The table of an edit probe (`probe` or `fit_probe`): P(search again) per side, as collected
    and edited, for the units that recorded it."""
    lines = [
        "| seed | row | miss: as collected | miss: gold put first | hit: as collected | hit: gold swapped out |",
        "|---|---|---|---|---|---|",
    ]
    for u in units:
        p = u.get(field, {})
        if "edited" not in p.get("miss", {}):
            continue

        def cell(side: str, which: str, p=p) -> str:
            v = p[side][which]
            return "-" if v is None else f"{100 * v:.1f} (n={p[side][n_key]})"

        lines.append(
            f"| {u['seed']} | {VARIANTS[u['variant']]} | {cell('miss', 'as_collected')} | {cell('miss', 'edited')} | "
            f"{cell('hit', 'as_collected')} | {cell('hit', 'edited')} |"
        )
    return lines


def own_rows_edited_lines(units: list[dict]) -> list[str]:
    """The edited-prompt probe at the unit's own trained rows about people (units that recorded it)."""
    table = edit_table(units, "fit_probe", "n_edited")
    if len(table) == 2:
        return []
    return [
        "",
        "## Reading or recalling? The edit at the students' own rows",
        "",
        "The edited-prompt probe's two edits at the turn-2 prompts of each unit's own trained rows about "
        "people (the rows of the fit column above; a hit row whose gold passage has no same-worded "
        "distractor left to swap in is left out). A student that reads the first results follows the "
        "edit; one that recalls each trained sub-query's decision does not.",
        "",
        *table,
    ]


def world_settings(worlds: dict[int, dict]) -> dict:
    """The worlds' size and options as the seed files record them (all seeds share them)."""
    if not worlds:
        return {"entities": ENTITIES, "questions": QUESTIONS, "options": None}
    key = next(iter(worlds.values()))["key"]
    return {
        "entities": key["config"]["entities"],
        "questions": key["config"]["questions"],
        "options": key["world"],
    }


def world_line(worlds: dict[int, dict]) -> str:
    """The worlds' settings in one line: the options that differ from `DECOUPLED_WORLD`, and the size."""
    from executor_sft.synthetic import DECOUPLED_WORLD

    w = world_settings(worlds)
    changed = {k: v for k, v in (w["options"] or {}).items() if DECOUPLED_WORLD.get(k) != v}
    extra = "".join(f", {k} {v}" for k, v in changed.items())
    return (
        f"`DECOUPLED_WORLD` (docs/synthetic.md){extra}, {w['entities']} entities, {w['questions']} questions"
    )


def render(done_dir: Path, command: str) -> tuple[str, dict]:
    from bench.probing.surface import FirstSearch, shortcut_accuracy

    worlds = {
        int(p.stem[4:].split("-")[0]): json.loads(p.read_text())
        for p in sorted(done_dir.glob("seed*-world.json"))
    }
    units = [json.loads(p.read_text()) for p in sorted(done_dir.glob("seed*-[cma].json"))]
    units.sort(key=lambda u: (u["seed"], list(VARIANTS).index(u["variant"])))
    lines = [
        "# The filter's mechanism on the decoupled world: (c) vs the matched control (a') and (a)",
        "",
        f"Command: `{command}`. Written from the done files in `{_shown(done_dir)}/`"
        f" ({len(units)} of {3 * len(worlds) or 9} (variant, seed) units finished).",
        "",
        f"World: {world_line(worlds)}; the teacher double-checks "
        "(searches again when the passage it wants is in the first results but not first), no coin. "
        "Evaluation: every held-out person sub-query, mean@4 at T=0.6; a run's first results hold gold when "
        "its first search returned the sub-query's gold passage. Intervals: 95%, 10,000 resamples of the "
        "subject entities (each with all its runs); an interval that collapses to a point is given as the "
        "exact one-sided 95% bound over the subjects.",
        "",
        *fit_lines(units),
        "## Shortcut probes (before training)",
        "",
        "Balanced accuracy of a bag-of-words logistic regression predicting \"the teacher's first search "
        "misses the gold passage\" (a second search is needed), fitted on the train split's person "
        "sub-queries and scored on the held-out ones (0.5 = chance; the bar is <= 0.6). One cue is "
        "structural: a sub-query that names no descriptor never needs a second search (no passage could "
        'tell its namesakes apart), so the rule "search again iff a descriptor is named" is scored too, '
        "and both probes again on the sub-queries that name one:",
        "",
        "| seed | from the sub-query | from Doc 1 | descriptor rule | sub-query, named only | Doc 1, named only "
        "| held-out (needed) | train (needed) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pooled_train: list = []
    pooled_test: list = []
    for seed, w in sorted(worlds.items()):
        s = w["shortcuts"]
        lines.append(
            f"| {seed} | {s['sub_query']:.3f} | {s['doc1']:.3f} | {_acc(s, 'descriptor_rule')} | "
            f"{_acc(s, 'named_sub_query')} | {_acc(s, 'named_doc1')} | {s['n_test']} ({s['needed_test']}) | "
            f"{s['n_train']} ({s['needed_train']}) |"
        )
        pooled_train += [FirstSearch(**f) for f in w["first_searches"]["train"]]
        pooled_test += [FirstSearch(**f) for f in w["first_searches"]["test"]]
    pooled = shortcut_accuracy(pooled_train, pooled_test) if worlds else None
    if pooled:
        lines.append(
            f"| pooled | {pooled['sub_query']:.3f} | {pooled['doc1']:.3f} | {_acc(pooled, 'descriptor_rule')} | "
            f"{_acc(pooled, 'named_sub_query')} | {_acc(pooled, 'named_doc1')} | {pooled['n_test']} "
            f"({pooled['needed_test']}) | {pooled['n_train']} ({pooled['needed_train']}) |"
        )
    lines += [
        "",
        "## P(second search) per seed and variant",
        "",
        "| seed | row | steps | rows (two-search) | "
        + " | ".join(label for _, label in FIGURES)
        + " | EM | tokens / sub-query |",
        "|---|---|---|---|" + "---|" * len(FIGURES) + "---|---|",
    ]
    table: dict[str, dict[int, dict]] = {}
    for seed, w in sorted(worlds.items()):
        teacher = {"seed": seed, "runs": w["teacher"]}
        figs = unit_figures(teacher)
        lines.append(
            f"| {seed} | scripted teacher (greedy) | - | - | "
            + " | ".join(_fmt_share(figs[f]) for f, _ in FIGURES)
            + f" | {100 * figs['em']:.1f} | {figs['tokens']:.0f} |"
        )
        for u in [u for u in units if u["seed"] == seed]:
            figs = unit_figures(u)
            table.setdefault(u["variant"], {})[seed] = {**figs, "steps": u["steps"], "probe": u["probe"]}
            lines.append(
                f"| {seed} | {VARIANTS[u['variant']]} | {u['steps']} | {u['rows']} ({u['two_search_rows']}) | "
                + " | ".join(_fmt_share(figs[f]) for f, _ in FIGURES)
                + f" | {100 * figs['em']:.1f} | {figs['tokens']:.0f} |"
            )
    lines += ["", "Over seeds (mean ± std of the per-seed figures, %; EM %, tokens):", ""]
    lines += ["| row | seeds | " + " | ".join(label for _, label in FIGURES) + " | EM | tokens |"]
    lines += ["|---|---|" + "---|" * len(FIGURES) + "---|---|"]
    for v, per_seed in table.items():
        cells = [
            _mean_std([100 * s[f]["p"] for s in per_seed.values() if s[f].get("p") is not None])
            for f, _ in FIGURES
        ]
        em = _mean_std([100 * s["em"] for s in per_seed.values()])
        tok = _mean_std([s["tokens"] for s in per_seed.values()])
        lines.append(f"| {VARIANTS[v]} | {len(per_seed)} | " + " | ".join(cells) + f" | {em} | {tok} |")
    lines += [
        "",
        "## The edited-prompt probe",
        "",
        "P(search again) at the teacher's turn-2 prompt (one forward pass), mean over prompts. `miss` side: "
        "prompts whose first results lack the gold passage, edited to put it first (a reader should stop). "
        "`hit` side: prompts whose first results hold it, edited to swap it for a same-worded distractor "
        "(a reader should search again).",
        "",
        *edit_table(units, "probe", "n"),
    ]
    lines += row_lines(units)
    lines += own_rows_edited_lines(units)
    gaps, gap_data = gap_lines(units)
    lines += gaps
    named, named_data = named_lines(units, worlds)
    lines += named
    steps = {(u["seed"], u["variant"]): u["steps"] for u in units}
    data = {
        "command": command,
        "world": world_settings(worlds),
        "shortcuts": {str(s): w["shortcuts"] for s, w in worlds.items()},
        "shortcuts_pooled": pooled,
        "steps": {f"seed{s}-{v}": n for (s, v), n in steps.items()},
        "steps_equal_within_seed": all(
            len({n for (s2, _), n in steps.items() if s2 == s}) == 1 for s in {s for s, _ in steps}
        ),
        "variants": {v: {str(s): figs for s, figs in per_seed.items()} for v, per_seed in table.items()},
        "person_rows": {
            f"seed{u['seed']}-{u['variant']}": u["person_rows"] for u in units if "person_rows" in u
        },
        "fit_probe": {f"seed{u['seed']}-{u['variant']}": u["fit_probe"] for u in units if "fit_probe" in u},
        "selectivity_gap": gap_data,
        "selectivity_named": named_data,
    }
    return "\n".join(lines) + "\n", data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "recipes" / "configs" / "demo.yaml"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--out", default="outputs/demo-ablation-decoupled", help="one sub-directory per seed")
    p.add_argument("--done_dir", default=str(DONE_DIR))
    p.add_argument("--results", default=str(RESULTS), help="markdown; the JSON beside it")
    p.add_argument("--done_only", action="store_true", help="tables from the finished units; trains nothing")
    p.add_argument(
        "--prepare_only",
        action="store_true",
        help="make each seed's world, index, rollouts and seed file, then stop (for bench/decoupled_readout.py)",
    )
    p.add_argument("--steps", type=int, default=None, help="instead of two epochs of (c)'s rows")
    p.add_argument("--entities", type=int, default=ENTITIES, help="world size (the rows experiment)")
    p.add_argument("--questions", type=int, default=QUESTIONS)
    p.add_argument(
        "--test_share",
        type=float,
        default=None,
        help="held-out share of questions (default: DECOUPLED_WORLD's)",
    )
    a = p.parse_args(argv)
    command = "python bench/demo_ablation_decoupled.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    done_dir = Path(a.done_dir)

    def write() -> None:
        md, data = render(done_dir, command.strip())
        results = Path(a.results)
        results.write_text(md, encoding="utf-8")
        results.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    if not a.done_only:
        options = world_options(a.test_share)
        configs = {s: seed_config(a, s) for s in a.seeds}
        preps = {s: prepare(cfg, options, done_dir) for s, cfg in configs.items()}
        if a.prepare_only:
            return 0
        write()
        for s, cfg in configs.items():
            steps = a.steps or steps_for(cfg, options)
            for v in a.variants:
                run_unit(v, cfg, preps[s], steps, done_dir)
                write()
    write()
    return 0


if __name__ == "__main__":
    from executor_sft.recipe_main import run_recipe

    run_recipe(main)  # SIGTERM or Ctrl-C in training: one line naming the checkpoint to resume from
