"""Filter ablation on the CPU demo (issue #18): does the counterfactual filter teach *when* to search twice?

    nohup python bench/demo_ablation.py --seeds 0 1 2 > bench/demo_ablation.log 2>&1 &

Per seed, the world, index and collection of `recipes/demo.py` (its config, default
`recipes/configs/demo.yaml`) are made ONCE; the same rollouts are then filtered three ways and
a student is trained on each with the same step budget, random data order and seed:

- (a) naive distillation: every correct teacher and student run, any number of searches
  (the filter's `all_correct` ablation stratum);
- (b) `single_search` only;
- (c) the full filter (`single_search` + `info_gain_multi_search`, the default).

Each trained student, the untrained student and the scripted teacher (references, greedy) are
evaluated on the same balanced sample of held-out sub-queries (`subqueries_test.jsonl`: the
first `--per_type` of each type, `single_hop` and `single_hop_ambiguous`, in file order). A
trained student is evaluated in every mode of `--evals`: `greedy`, or `mean@N:T` (the paper's
sampled evaluation: N runs per sub-query at temperature T; default mean@4 at 0.6, the paper
configs' executor temperature), where P(2 searches) is the share of all runs. The first mode
gives each seed's `mechanism`: (c)'s P(2 searches | ambiguous) - P(2 searches | plain) with a
95% interval from resampling sub-queries (`bench.probing.share_difference`), and
`c_vs_a` (EM, tokens per sub-query).
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
evaluations, each variant's training, each of its evaluation modes) with the config it was
made with, and a re-run with the same config reads it back instead of redoing it; a new
`--evals` mode on a kept checkpoint only evaluates. Results (markdown + JSON) are rewritten
after every finished step.

Convergence mode (issue #39), on with `--epochs E`:

    nohup python bench/demo_ablation.py --seeds 0 1 2 --epochs 3 --probe_every 8 > bench/demo_ablation.log 2>&1 &

- every variant trains E passes over its rows (num_train_epochs, not max_steps) with the one
  learning rate and schedule of the config (or `--learning_rate`, `--lr_scheduler_type`), the
  fast path's exact `--gathered_loss` (on by default) and optionally `--trainable_layers N`;
  `--heldout_rows` of its rows (seeded) are kept out of training for a held-out loss;
- every `--probe_every` steps and at the last one, the turn-2 probe (`bench.probing.probe`:
  P(search again) at the scripted teacher's turn-2 prompt of each held-out evaluation
  sub-query, one forward pass per continuation) is recorded with the training and held-out
  losses in `variant-<v>/student-sft/probe.jsonl`, and a checkpoint is saved there (the last
  one only); a killed run resumes from it, per (variant, seed);
- early stop (`bench.probing.callback.PlateauRule`): after `--plateau_min_epochs`,
  at a probe where, over the last `--plateau_patience` + 1 probes, the probe's difference
  (ambiguous - plain) ranges over at most `--plateau_diff` (probability) and the held-out loss
  over at most `--plateau_loss` times its latest value. Each variant records what stopped it,
  `"stopped": "epochs"` or `"plateau"`, and its `probe_curve`;
- the seed's `probe` (beside `mechanism`) is (c)'s probe difference, interval and step at its
  final checkpoint; one PNG per seed, (a), (b) and (c) side by side, under `--img_dir`;
- each finished (variant, seed) is written to `--done_dir`/seed<k>-<variant>.json (small: commit
  it), and read back as done by a run with the same settings on any machine; `--done_only` makes
  the tables from those alone while other units are still training (it trains nothing).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from executor_sft.agents.parsing import parse_tool_arguments
from executor_sft.demos.demo import (
    DemoConfig,
    _student_model,
    collect_demo,
    eval_mode,
    evaluate,
    load_config,
    train_demo,
)
from executor_sft.demos.sample_data import ROLLOUTS, SFT, SFT_REPORT, bm25_index, provenance
from executor_sft.errors import InputError
from executor_sft.files import read_json_object, write_text
from executor_sft.filters import (
    ALL_CORRECT,
    SINGLE_SEARCH,
    FilterConfig,
    filter_episodes,
    iter_episodes_by_id,
    write_json,
    write_jsonl,
)
from executor_sft.recipe_main import run_recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.probing
from bench.probing.callback import ProbeCallback, read_records, stopped_by  # noqa: E402
from bench.probing.convergence import ConvergenceConfig, split_heldout  # noqa: E402
from bench.probing.probe import AMBIGUOUS, PLAIN, turn2_prompts  # noqa: E402
from bench.probing.share_difference import share_difference  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "recipes" / "configs" / "demo.yaml"
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
TRAINED = "trained.json"
HELDOUT = "heldout.jsonl"
PROBE = "probe.jsonl"
TRAINING = "training.json"
"""The key a variant's checkpoints were trained with (convergence mode): another key starts afresh."""
PLOTTED = ("a", "b", "c")
"""The variants side by side in each seed's probe figure, in the tables' order."""
GREEDY = "greedy"
MECHANISM_VARIANT = "c"
EVAL_FIELDS = {"eval_samples", "eval_temperature"}
"""DemoConfig fields that only change how a trained student is evaluated, not what is trained."""


def parse_eval(text: str) -> tuple[int, float]:
    """`greedy` -> (1, 0.0); `mean@N:T` -> (N, T): N sampled runs per sub-query at temperature T."""
    if text == GREEDY:
        return 1, 0.0
    try:
        head, temp = text.split(":")
        samples, temperature = int(head.removeprefix("mean@")), float(temp)
        if not head.startswith("mean@") or samples < 1 or temperature <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use 'greedy' or 'mean@N:T' (e.g. mean@4:0.6)") from None
    return samples, temperature


def eval_dir(mode: str) -> str:
    """A variant's folder for one evaluation mode ("mean@4:0.6" -> "eval-mean4_t0.6")."""
    return "eval-" + mode.replace("@", "").replace(":", "_t")


def _with_mode(cfg: DemoConfig, mode: str) -> DemoConfig:
    samples, temperature = parse_eval(mode)
    return cfg.model_copy(update={"eval_samples": samples, "eval_temperature": temperature})


def _train_config(cfg: DemoConfig) -> dict:
    """The config without the evaluation-mode fields: what collection and training depend on."""
    return cfg.model_dump(exclude=EVAL_FIELDS)


def log(msg: str) -> None:
    print(f"[ablation] {msg}", file=sys.stderr, flush=True)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _done(path: Path, key: dict, needs: tuple[str, ...] = (), match: bool = True) -> dict | None:
    """The saved result at `path` if it was made with exactly `key` (and holds `needs`); a file
    that cannot be one (cut, empty, a list, not UTF-8, a folder, a field missing) is an `InputError`.
    `match=False` checks the file whatever its key."""
    if not path.exists():
        return None
    fix = "delete it to redo this unit, or restore it (git checkout -- FILE)"
    saved = read_json_object(path, fix)
    if match and saved.get("key") != _jsonable(key):
        return None
    if missing := [n for n in needs if n not in saved]:
        raise InputError(f"{path}: has no {', '.join(map(repr, missing))}; {fix}")
    return saved


def _done_file_problem(path: Path) -> None:
    """Raise an `InputError` when `path` exists and is not a done file (`_save`'s key and result)."""
    if path.exists():
        _done(path, {}, ("key", "result"), match=False)


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
    if (mech := mechanism(runs_path, sub_queries)) is not None:
        out["mechanism"] = mech
    return out


def mechanism(runs_path: Path, sub_queries: list) -> dict | None:
    """P(2 searches | ambiguous) - P(2 searches | plain) over the runs in `runs_path`, with a 95%
    interval from resampling sub-queries (each with all of its runs); None without both types."""
    types = {q.id: _type_of(q) for q in sub_queries}
    runs: dict[str, dict[str, list[float]]] = {PLAIN: {}, AMBIGUOUS: {}}
    for line in runs_path.read_text(encoding="utf-8").splitlines():
        score = json.loads(line)["score"]
        if (t := types.get(score["id"])) in runs:
            runs[t].setdefault(score["id"], []).append(float(score["n_searches"] >= 2))
    if not runs[PLAIN] or not runs[AMBIGUOUS]:
        return None
    return share_difference(list(runs[AMBIGUOUS].values()), list(runs[PLAIN].values())).to_dict()


def second_search_follow(runs_path: Path, sub_queries: list) -> dict[str, Any]:
    """Does a run's second search follow what its first one returned, or the sub-query's form?

    P(2 searches) over the runs whose first results hold a gold passage and over those whose
    first results do not; over the runs of sub-queries that name a descriptor in parentheses
    ("Ann Lee (singer)", the world's way to say which namesake) and of those that do not; and
    the share of second searches that repeat the first query (case and spaces aside). Every
    ambiguous sub-query names a descriptor, and so do plain ones whose subject a hop led to, so
    the form is a partial cue. A student that learned the condition searches again only when
    the first results miss."""
    gold = {q.id: set(q.positive_doc_ids or []) for q in sub_queries}
    named = {q.id: _descriptor(q.question) is not None for q in sub_queries}
    again: dict[str, list[bool]] = {
        "gold_first": [],
        "no_gold_first": [],
        "descriptor": [],
        "no_descriptor": [],
    }
    repeats: list[bool] = []
    for line in runs_path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        qid, searches = record["score"]["id"], record["run"]["searches"]
        if qid in named:
            again["descriptor" if named[qid] else "no_descriptor"].append(len(searches) >= 2)
        if not searches or not gold.get(qid):
            continue
        hit = bool(set(searches[0]["doc_ids"]) & gold[qid])
        again["gold_first" if hit else "no_gold_first"].append(len(searches) >= 2)
        if len(searches) >= 2:
            repeats.append(_words(searches[1]["query"]) == _words(searches[0]["query"]))
    out: dict[str, Any] = {}
    for group, xs in again.items():
        out[f"n_{group}"] = len(xs)
        out[f"p2_{group}"] = sum(xs) / len(xs) if xs else None
    out["n_two_search"] = len(repeats)
    out["repeat_query"] = sum(repeats) / len(repeats) if repeats else None
    return out


def two_search_rows(sft_path: Path) -> dict[str, int]:
    """What the variant's two-search SFT rows teach the second query: how many rows search at
    least twice, how many repeat the first query, and how many add the sub-query's descriptor
    that the first query left out."""
    out = {"rows": 0, "repeat_first_query": 0, "add_descriptor": 0}
    for line in sft_path.read_text(encoding="utf-8").splitlines():
        messages = json.loads(line)["messages"]
        queries = [
            (parse_tool_arguments(call["function"]["arguments"])[0] or {}).get("query", "")
            for m in messages
            for call in m.get("tool_calls") or []
        ]
        if len(queries) < 2:
            continue
        out["rows"] += 1
        out["repeat_first_query"] += _words(queries[1]) == _words(queries[0])
        sub_query = next(m["content"] for m in messages if m["role"] == "user")
        if (descriptor := _descriptor(sub_query)) is not None:
            out["add_descriptor"] += descriptor in _words(queries[1]) and descriptor not in _words(queries[0])
    return out


def _descriptor(sub_query: str) -> str | None:
    """The parenthesised descriptor a sub-query names ("Ann Lee (singer)" -> "singer"), if any."""
    found = re.search(r"\(([^)]+)\)", sub_query)
    return _words(found.group(1)) if found is not None else None


def _words(query: str) -> str:
    return " ".join(query.lower().split())


def prepare_seed(cfg: DemoConfig, out: Path, show_progress: bool = True):
    """World, index and collection, once per seed: (world, retriever, index_dir, seconds)."""
    from executor_sft.synthetic import load_world, write_world

    world_dir = out / "world"
    marker = out / "collected.json"
    key = {"config": _train_config(cfg)}
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
    """The untrained student or the scripted teacher on the evaluation sample, greedy (resumable).

    Greedy whatever the variants' evaluation: the teacher is scripted (sampling changes
    nothing), and the untrained student answers in prose either way (EM 0)."""
    from executor_sft.synthetic import ScriptedTeacherExecutor

    cfg = _with_mode(cfg, GREEDY)
    ref_dir = out / f"ref-{name}"
    key = {"config": _train_config(cfg), "reference": name, "eval_ids": [q.id for q in sub_queries]}
    runs = ref_dir / "eval.jsonl"
    if (done := _done(ref_dir / RESULT, key)) is not None:
        log(f"seed {cfg.seed}: reusing {REFERENCES[name]} evaluation")
        return {**done, "eval": {**done["eval"], "follow": second_search_follow(runs, sub_queries)}}
    log(f"seed {cfg.seed}: evaluating the {REFERENCES[name]} on {len(sub_queries)} sub-queries")
    model = _student_model(cfg) if name == "untrained" else ScriptedTeacherExecutor(world)
    label = f"{cfg.model} (untrained)" if name == "untrained" else "scripted teacher"
    result = evaluate(cfg, model, retriever, sub_queries, label, runs, show_progress)
    if name == "untrained":
        model.close()
    done = _save(ref_dir / RESULT, {"key": key, "eval": _summary(result, runs, sub_queries)})
    return {**done, "eval": {**done["eval"], "follow": second_search_follow(runs, sub_queries)}}


def _train_key(cfg: DemoConfig, variant: str, convergence: ConvergenceConfig | None) -> dict:
    """What a variant's training depends on (the convergence settings only when that mode is on,
    so the fixed-steps mode's saved results keep their key)."""
    key = {"config": _train_config(cfg), "variant": variant, "filter": VARIANTS[variant][1].to_dict()}
    if convergence is not None:
        key["convergence"] = convergence.model_dump()
    return key


def train_variant(variant, cfg, out, convergence=None, probe_prompts=()) -> tuple[dict, Path]:
    """Filter the seed's rollouts with `variant` and train a student (resumable): (result, checkpoint).

    With `convergence`, `convergence.heldout_rows` of the variant's rows are kept out of
    training (`heldout.jsonl`), the probe callback writes `student-sft/probe.jsonl` on
    `probe_prompts`, and a killed run resumes from its last checkpoint."""
    _, filter_cfg = VARIANTS[variant]
    var_dir = out / f"variant-{variant}"
    ckpt = var_dir / "student-sft"
    key = _train_key(cfg, variant, convergence)
    if (done := _done(var_dir / TRAINED, key)) is not None and ckpt.is_dir():
        log(f"seed {cfg.seed} variant {variant}: reusing the student trained in {ckpt}")
        return done, ckpt
    var_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    filtered = filter_episodes(iter_episodes_by_id(out / ROLLOUTS), filter_cfg)
    if not filtered.rows:
        raise RuntimeError(f"variant {variant}: the filter kept no rows: {filtered.report['exclusions']}")
    rows, heldout = filtered.rows, []
    if convergence is not None and convergence.heldout_rows:
        rows, heldout = split_heldout(rows, convergence.heldout_rows, cfg.seed)
        write_jsonl(var_dir / HELDOUT, heldout)
    write_jsonl(var_dir / SFT, rows)
    write_json(var_dir / SFT_REPORT, filtered.report)
    sft_rows = {k: v["records"] for k, v in filtered.report["strata"].items()}
    seconds["filter"] = time.perf_counter() - t
    log(
        f"seed {cfg.seed} variant {variant}: training on {len(rows)} rows {sft_rows}"
        + (f" ({len(heldout)} held out)" if heldout else "")
    )
    t = time.perf_counter()
    callbacks = None
    if convergence is None:
        shutil.rmtree(ckpt, ignore_errors=True)
    else:
        if _done(var_dir / TRAINING, key) is None:  # checkpoints of another configuration, or none
            shutil.rmtree(ckpt, ignore_errors=True)
            _save(var_dir / TRAINING, {"key": key})
        elif (ended := _ended_run(ckpt)) is not None:
            # Trained to its end (its epochs, or a plateau: not "finished" to the Trainer), but the
            # process stopped before the record below was written.
            log(
                f"seed {cfg.seed} variant {variant}: {ckpt} holds the ended run (step {ended['global_step']})"
            )
            return _save(
                var_dir / TRAINED, _trained_record(key, sft_rows, ended, seconds, ckpt, heldout)
            ), ckpt
        callbacks = [
            ProbeCallback(
                probe_prompts,
                ckpt / PROBE,
                convergence.probe_every,
                heldout_rows=heldout,
                max_length=cfg.max_length,
                plateau=convergence.plateau_rule(),
                seed=cfg.seed,
            )
        ]
    train = train_demo(cfg, var_dir / SFT, ckpt, convergence=convergence, callbacks=callbacks)
    seconds["sft"] = time.perf_counter() - t
    log(f"seed {cfg.seed} variant {variant}: trained in {seconds['sft']:.0f}s")
    trained = _trained_record(key, sft_rows, train.metrics, seconds, ckpt if convergence else None, heldout)
    if convergence is not None:
        log(
            f"seed {cfg.seed} variant {variant}: stopped by {trained['stopped']} at step "
            f"{trained['probe_curve'][-1]['step']}"
        )
        # The run has ended and its model is saved in `ckpt`: its resume checkpoint (weights and
        # optimizer state, ~1.6 GB for SmolLM2) is no longer needed.
        for folder in ckpt.glob("checkpoint-*"):
            shutil.rmtree(folder, ignore_errors=True)
    return _save(var_dir / TRAINED, trained), ckpt


def _trained_record(key, sft_rows, metrics, seconds, ckpt: Path | None, heldout) -> dict:
    """A variant's training record; with `ckpt` (convergence mode) its probe curve (without the
    per-prompt probabilities, which stay in `probe.jsonl`) and what stopped it."""
    trained = {
        "key": key,
        "sft_rows": sft_rows,
        "train_metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)},
        "seconds": seconds,
    }
    if ckpt is not None:
        records = read_records(ckpt / PROBE)
        trained.update(
            heldout_rows=len(heldout),
            stopped=stopped_by(records),
            probe_curve=[{k: v for k, v in r.items() if k != "probs"} for r in records],
        )
    return trained


def _ended_run(ckpt: Path) -> dict | None:
    """The train metrics of a run that ended in `ckpt` (the final save: weights, train_results.json,
    trainer_state.json) at the step of its last probe record, else None."""
    state, results = ckpt / "trainer_state.json", ckpt / "train_results.json"
    records = read_records(ckpt / PROBE)
    if not (state.is_file() and results.is_file() and records):
        return None
    step = json.loads(state.read_text(encoding="utf-8")).get("global_step")
    if step != records[-1]["step"]:
        return None
    return {**json.loads(results.read_text(encoding="utf-8")), "global_step": step}


def _portable_key(key: dict) -> dict:
    """`key` without the output folder: what a finished result in `done_dir` is matched on."""
    return {**key, "config": {k: v for k, v in key["config"].items() if k != "out"}}


def run_variant(
    variant,
    cfg,
    out,
    retriever,
    sub_queries,
    modes=(GREEDY,),
    show_progress=True,
    *,
    convergence=None,
    probe_prompts=(),
    done_dir=None,
    done_only=False,
) -> dict | None:
    """Train `variant` once, evaluate it in each of `modes` (each resumable on its own): the first
    mode is the variant's `eval`, every mode's summary is in `evals`.

    With `done_dir`, the finished result is also written to `done_dir/seed<k>-<variant>.json`
    (small, to be committed), and one found there with the same key (the output folder aside)
    is read back instead of training or evaluating: a run resumes across machines. With
    `done_only`, a variant not found there is left out (None) instead of trained."""
    var_dir = out / f"variant-{variant}"
    key = {
        **_train_key(cfg, variant, convergence),
        "eval_ids": [q.id for q in sub_queries],
        "evals": list(modes),
    }
    done_path = Path(done_dir) / f"seed{cfg.seed}-{variant}.json" if done_dir is not None else None
    if done_path is not None and (done := _done(done_path, _portable_key(key), ("result",))) is not None:
        log(f"seed {cfg.seed} variant {variant}: reading the finished result {done_path}")
        return done["result"]
    if done_only:
        log(f"seed {cfg.seed} variant {variant}: not finished in {done_dir}; left out (--done_only)")
        return None
    key = {k: v for k, v in key.items() if k != "evals"}
    evals: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    trained = ckpt = None
    for mode in modes:
        mode_cfg = _with_mode(cfg, mode)
        mode_dir = var_dir / eval_dir(mode)
        mode_key = {**key, "eval": mode}
        if (done := _done(mode_dir / RESULT, mode_key)) is not None:
            log(f"seed {cfg.seed} variant {variant}: reusing its {mode} evaluation")
        else:
            if trained is None:
                trained, ckpt = train_variant(variant, cfg, out, convergence, probe_prompts)
            log(f"seed {cfg.seed} variant {variant}: evaluating, {eval_mode(mode_cfg)}")
            t = time.perf_counter()
            model = _student_model(mode_cfg, str(ckpt))
            runs = mode_dir / "eval.jsonl"
            label = f"{cfg.model} SFT {VARIANTS[variant][0]}"
            result = evaluate(mode_cfg, model, retriever, sub_queries, label, runs, show_progress)
            model.close()
            summary = _summary(result, runs, sub_queries)
            done = _save(
                mode_dir / RESULT, {"key": mode_key, "eval": summary, "seconds": time.perf_counter() - t}
            )
            log(
                f"seed {cfg.seed} variant {variant} ({mode}): EM {100 * summary['em']:.1f}%, "
                f"P(2 searches) plain {100 * summary.get(f'p2:{PLAIN}', 0):.1f}% / ambiguous "
                f"{100 * summary.get(f'p2:{AMBIGUOUS}', 0):.1f}%, {summary['tokens']:.0f} tokens / sub-query"
            )
        evals[mode] = {**done["eval"], "follow": second_search_follow(mode_dir / "eval.jsonl", sub_queries)}
        seconds[f"eval {mode}"] = done["seconds"]
    if trained is None:
        trained = _done(var_dir / TRAINED, _train_key(cfg, variant, convergence))
        if trained is None:  # every evaluation was read back, but the training record is gone
            trained, ckpt = train_variant(variant, cfg, out, convergence, probe_prompts)
    if not cfg.keep_checkpoint:
        shutil.rmtree(var_dir / "student-sft", ignore_errors=True)
    result = {
        "sft_rows": trained["sft_rows"],
        "two_search_rows": two_search_rows(var_dir / SFT),
        "train_metrics": trained["train_metrics"],
        "eval": evals[modes[0]],
        "evals": evals,
        "seconds": {**trained["seconds"], **seconds},
    }
    for name in ("heldout_rows", "stopped", "probe_curve"):
        if name in trained:
            result[name] = trained[name]
    if done_path is not None:
        _save(done_path, {"key": _portable_key({**key, "evals": list(modes)}), "result": result})
    return result


def run_seed(
    cfg: DemoConfig,
    variants: list[str],
    per_type: int = 16,
    modes: tuple[str, ...] | list[str] = (GREEDY,),
    references: tuple[str, ...] | list[str] = tuple(REFERENCES),
    *,
    show_progress: bool = True,
    on_step=None,
    convergence: ConvergenceConfig | None = None,
    done_dir: Path | None = None,
    done_only: bool = False,
) -> dict[str, Any]:
    """One seed: collect once, evaluate the references, train each variant and evaluate it in
    every mode of `modes` (the first is the one reported as its `eval` and `mechanism`).

    `on_step(partial)` is called with the seed's partial result after every finished step.
    With `convergence`, the scripted teacher's evaluation is always run: its turn-2 prompts on
    the held-out sub-queries are the probe's. `done_dir`, `done_only`: see `run_variant`.
    """
    if convergence is not None and "teacher" not in references:
        references = [*references, "teacher"]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    world, retriever, index_dir, collect_seconds = prepare_seed(cfg, out, show_progress)
    sub_queries = balanced_subqueries(out / "world" / "subqueries_test.jsonl", per_type)
    partial: dict[str, Any] = {
        "seed": cfg.seed,
        "config": _with_mode(cfg, modes[0]).model_dump(),
        "evals": list(modes),
        "provenance": _provenance(cfg, modes[0], convergence, index_dir),
        "eval_set": {t: sum(_type_of(q) == t for q in sub_queries) for t in TYPES},
        "seconds": dict(collect_seconds),
        "references": {},
        "variants": {},
    }
    for name in references:
        ref = run_reference(name, cfg, out, world, retriever, sub_queries, show_progress)
        partial["references"][name] = ref["eval"]
        partial["seconds"][f"eval_{name}"] = ref["eval"]["seconds"]
        if on_step:
            on_step(partial)
    prompts = turn2_prompts(out / "ref-teacher" / "eval.jsonl", TYPES) if convergence is not None else []
    if convergence is not None:
        if missing := [t for t in TYPES if not any(p.kind == t for p in prompts)]:
            raise RuntimeError(f"seed {cfg.seed}: no turn-2 prompt of the teacher for {missing}: no probe")
        partial["convergence"] = convergence.model_dump()
        partial["probe_prompts"] = {t: sum(p.kind == t for p in prompts) for t in TYPES}
    for v in variants:
        res = run_variant(
            v,
            cfg,
            out,
            retriever,
            sub_queries,
            tuple(modes),
            show_progress,
            convergence=convergence,
            probe_prompts=prompts,
            done_dir=done_dir,
            done_only=done_only,
        )
        if res is None:
            continue
        partial["variants"][v] = res
        partial["seconds"][f"variant_{v}"] = sum(res["seconds"].values())
        partial.update(seed_verdict(partial))
        if on_step:
            on_step(partial)
    return partial


def _provenance(cfg: DemoConfig, mode: str, convergence: ConvergenceConfig | None, index_dir: Path) -> dict:
    """What the seed's reported result was made with: the config under its first evaluation mode;
    in the convergence mode, `max_steps` None (the epochs decide) and the convergence settings."""
    out = provenance(_with_mode(cfg, mode), index_dir)
    if convergence is not None:
        out["config"]["max_steps"] = None
        out["convergence"] = convergence.model_dump()
    return out


def seed_verdict(seed: dict) -> dict[str, Any]:
    """The seed's `mechanism` (variant (c)'s P(2 | ambiguous) - P(2 | plain), 95% interval) and
    `c_vs_a` (EM and tokens per sub-query), from its first evaluation mode; with the convergence
    mode, `probe` ((c)'s probe difference and interval at its final checkpoint, and that step);
    {} until (c) is in."""
    c = seed["variants"].get(MECHANISM_VARIANT)
    if c is None:
        return {}
    out: dict[str, Any] = {}
    if "mechanism" in c["eval"]:
        m = c["eval"]["mechanism"]
        out["mechanism"] = {"variant": MECHANISM_VARIANT, "diff": m["diff"], "ci95": m["ci95"]}
        if (a := seed["variants"].get("a")) is not None:
            out["c_vs_a"] = {k: {"c": c["eval"][k], "a": a["eval"][k]} for k in ("em", "tokens")}
    if c.get("probe_curve"):
        last = c["probe_curve"][-1]
        out["probe"] = {"diff": last["diff"], "ci95": last["ci95"], "step": last["step"]}
    return out


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


def _modes_text(seeds: list[dict]) -> str:
    modes = sorted({s.get("evals", [GREEDY])[0] for s in seeds})
    return "; ".join(eval_mode(_mode_fields(m)) for m in modes)


def _mode_fields(mode: str) -> dict[str, Any]:
    samples, temperature = parse_eval(mode)
    return {"eval_samples": samples, "eval_temperature": temperature}


def _signed(x: float) -> str:
    return f"{100 * x:+.1f}"


def mechanism_lines(seeds: list[dict]) -> list[str]:
    """Per seed: (c)'s P(2 | ambiguous) - P(2 | plain) with its 95% interval, and (c) vs (a)."""
    with_m = [s for s in seeds if "mechanism" in s]
    if not with_m:
        return []
    lines = [
        f"Mechanism per seed ({_modes_text(with_m)}): ({MECHANISM_VARIANT})'s P(2 searches | ambiguous) − "
        "P(2 searches | plain) in points, 95% interval from 10,000 bootstrap resamples of the "
        "sub-queries of each type (each with all its runs: the runs of one sub-query are not "
        "independent, so a Wald/Newcombe interval over runs would be too narrow; an interval of "
        "[0, 0] means no resample ever differed, not certainty), and (c) against (a):",
        "",
        "| seed | diff (points) | 95% interval | EM (c) / (a) | tokens / sub-query (c) / (a) |",
        "|---|---|---|---|---|",
    ]
    for s in with_m:
        m, ca = s["mechanism"], s.get("c_vs_a")
        em = f"{100 * ca['em']['c']:.1f} / {100 * ca['em']['a']:.1f}" if ca else "- / -"
        tok = f"{ca['tokens']['c']:.0f} / {ca['tokens']['a']:.0f}" if ca else "- / -"
        lo, hi = m["ci95"]
        lines.append(
            f"| {s['seed']} | {_signed(m['diff'])} | [{_signed(lo)}, {_signed(hi)}] | {em} | {tok} |"
        )
    above = sum(s["mechanism"]["diff"] > 0 for s in with_m)
    clear = sum(s["mechanism"]["ci95"][0] > 0 for s in with_m)
    lines += [
        "",
        f"The difference is above zero on {above} of {len(with_m)} seed(s), and its interval "
        f"excludes zero on {clear}; "
        + (
            "the mechanism is shown on every seed."
            if above == len(with_m) and len(with_m) >= 3
            else "the mechanism is not shown on every seed (of at least 3)."
        ),
        "",
    ]
    return lines


def _share(share: float | None, n: int) -> str:
    return "-" if share is None else f"{100 * share:.1f} ({round(share * n)} of {n})"


def follow_lines(seeds: list[dict]) -> list[str]:
    """Per seed and variant: P(2 searches) when the first results hold a gold passage and when
    they do not, and how often the second query repeats the first (first evaluation mode)."""
    rows = []
    for s in seeds:
        named = [(f"({v})", res["eval"]) for v, res in s["variants"].items()]
        named += [(REFERENCES[r], ev) for r, ev in s["references"].items()]
        for label, ev in named:
            if (f := ev.get("follow")) is None:
                continue
            cells = [
                _share(f[f"p2_{g}"], f[f"n_{g}"])
                for g in ("gold_first", "no_gold_first", "descriptor", "no_descriptor")
            ]
            rows.append(
                f"| {s['seed']} | {label} | "
                + " | ".join(cells)
                + f" | {_share(f['repeat_query'], f['n_two_search'])} |"
            )
    if not rows:
        return []
    taught = [
        f"seed {s['seed']} ({v}): {t['rows']} rows search twice, {t['repeat_first_query']} repeat their "
        f"first query, {t['add_descriptor']} add the sub-query's descriptor the first query left out"
        for s in seeds
        for v, res in s["variants"].items()
        if (t := res.get("two_search_rows"))
    ]
    return [
        f"Does the second search follow the first results ({_modes_text(seeds)}; the references "
        "greedy)? A gold passage is "
        "one of the sub-query's positive documents; a student that learned the condition searches "
        "again when its first results miss it and stops when they hold it. A descriptor is the "
        "parenthesised occupation or country that says which namesake is meant: every ambiguous "
        "sub-query names one, and so do some plain ones, so the form alone is a partial cue:",
        "",
        "| seed | row | P(2 searches), first results hold gold | P(2 searches), first results miss gold "
        "| P(2 searches), sub-query names a descriptor | P(2 searches), no descriptor | second query = first query |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        *(["What the SFT rows teach the second query: " + "; ".join(taught) + ".", ""] if taught else []),
    ]


def other_modes_lines(seeds: list[dict]) -> list[str]:
    """The same checkpoints in the further evaluation modes, side by side with the first."""
    rows = []
    for s in seeds:
        modes = s.get("evals", [GREEDY])
        if len(modes) < 2:
            continue
        for v, res in s["variants"].items():
            for mode in modes:
                ev = res.get("evals", {}).get(mode)
                if ev is None:
                    continue
                cells = [_cell([ev[k]] if k in ev else [], sc) for k, _, sc in METRICS]
                m = ev.get("mechanism")
                diff = (
                    f"{_signed(m['diff'])} [{_signed(m['ci95'][0])}, {_signed(m['ci95'][1])}]" if m else "-"
                )
                lines = f"| {s['seed']} | ({v}) | {eval_mode(_mode_fields(mode))} | " + " | ".join(cells)
                rows.append(lines + f" | {diff} |")
    if not rows:
        return []
    return [
        "The same trained students, evaluated in each mode side by side:",
        "",
        "| seed | row | evaluation | " + " | ".join(lb for _, lb, _ in METRICS) + " | diff [95% interval] |",
        "|" + "---|" * (4 + len(METRICS)),
        *rows,
        "",
    ]


def training_text(seed: dict) -> str:
    """How a seed's variants were trained: the one learning rate and schedule, the length, and in
    the convergence mode its probe, checkpoint and stop settings."""
    c = seed["config"]
    text = (
        f"lr {c['learning_rate']:g}, {c['lr_scheduler_type']} schedule, warmup {c['warmup_ratio']:g}, "
        f"batch {c['batch_size'] * c['grad_accum']}, max_length {c['max_length']}"
    )
    conv = seed.get("convergence")
    if conv is None:
        return text + f", {c['max_steps']} steps"
    rule = (
        f"stop early when, over the last {conv['plateau_patience'] + 1} probes (after "
        f"{conv['plateau_min_epochs']:g} epoch(s)), the probe's difference ranges over at most "
        f"{100 * conv['plateau_diff']:g} points and the held-out loss over at most "
        f"{100 * conv['plateau_loss']:g}% of its latest value"
        if conv["plateau"]
        else "no early stop"
    )
    return (
        text + f", {conv['epochs']:g} epochs, probe and checkpoint every {conv['probe_every']} steps, "
        f"{conv['heldout_rows']} rows held out for the held-out loss, gathered_loss "
        f"{conv['gathered_loss']}, trainable_layers {conv['trainable_layers'] or 'all'}; {rule}"
    )


def probe_png(img_dir: Path, seed: int) -> Path:
    return Path(img_dir) / f"demo_ablation_probe_seed{seed}.png"


def plot_seed(seed: dict, img_dir: Path) -> Path | None:
    """The seed's probe curves, a panel per variant of `PLOTTED` that has one."""
    from bench.probing.plot import plot_probe_curves

    curves = {
        VARIANTS[v][0]: seed["variants"][v]["probe_curve"]
        for v in PLOTTED
        if seed["variants"].get(v, {}).get("probe_curve")
    }
    if not curves:
        return None
    return plot_probe_curves(
        curves, probe_png(img_dir, seed["seed"]), f"seed {seed['seed']}: the turn-2 probe"
    )


def _ci(lo_hi) -> str:
    return f"[{_signed(lo_hi[0])}, {_signed(lo_hi[1])}]"


def _link(path: Path, md_dir: Path | None) -> str:
    """`path` as the markdown file in `md_dir` links it (relative where it lies below)."""
    shown = Path(path).resolve()
    if md_dir is not None and shown.is_relative_to(Path(md_dir).resolve()):
        return shown.relative_to(Path(md_dir).resolve()).as_posix()
    return shown.as_posix()


def probe_lines(seeds: list[dict], img_dir: Path | None = None, md_dir: Path | None = None) -> list[str]:
    """Per seed and variant: the probe at the final checkpoint, what stopped training, the losses."""
    rows = []
    for s in seeds:
        for v, res in s["variants"].items():
            if not (curve := res.get("probe_curve")):
                continue
            last = curve[-1]
            losses = [last.get("loss"), last.get("heldout_loss")]
            loss_cells = " | ".join("-" if x is None else f"{x:.3f}" for x in losses)
            rows.append(
                f"| {s['seed']} | ({v}) | {last['step']} | {last.get('epoch') or 0:.2f} | {res['stopped']} | "
                f"{100 * last['p_plain']:.1f} | {100 * last['p_ambiguous']:.1f} | {_signed(last['diff'])} "
                f"{_ci(last['ci95'])} | {loss_cells} |"
            )
    if not rows:
        return []
    lines = [
        "The turn-2 probe during training (P(search again) = p(`<tool_call>`) / (p(`<tool_call>`) + "
        "p(`<answer>`)) at the scripted teacher's turn-2 prompt of each held-out sub-query; difference "
        "ambiguous − plain in points, 95% interval from resampling the prompts), at each variant's "
        "final checkpoint:",
        "",
        "| seed | row | step | epoch | stopped by | P(again) plain % | P(again) ambiguous % | "
        "diff [95% interval] | training loss | held-out loss |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Training: " + "; ".join(f"seed {s['seed']}: {training_text(s)}" for s in seeds) + ".",
        "",
    ]
    if img_dir is not None:
        for s in seeds:
            png = probe_png(img_dir, s["seed"])
            if png.exists():
                lines.append(f"![seed {s['seed']}: probe curves]({_link(png, md_dir)})")
        lines.append("")
    return lines


def uneven_lines(seeds: list[dict]) -> list[str]:
    """When the variants do not share their seeds (`--done_only` while units train): say so, since
    the means above then average different seeds and are not compared."""
    by_variant = {v: [s["seed"] for s in seeds if v in s["variants"]] for v in VARIANTS}
    by_variant = {v: found for v, found in by_variant.items() if found}
    if len({tuple(found) for found in by_variant.values()}) <= 1:
        return []
    units = "; ".join(f"({v}) seed {', '.join(map(str, found))}" for v, found in by_variant.items())
    return [
        f"Not every variant has every seed yet ({units}): the rows above average different seeds, so "
        "they are not compared here; the per-seed tables below compare the variants seed by seed."
    ]


def render(
    seeds: list[dict], command: str, elapsed: float, img_dir: Path | None = None, md_dir: Path | None = None
) -> str:
    agg = aggregate(seeds)
    header = ["row", "SFT rows"] + [label for _, label, _ in METRICS]
    lines = [
        "# Filter ablation on the CPU demo: naive vs single_search vs full filter",
        "",
        "On the world with cues (the default synthetic world; a review found its surface gives the label "
        "away: see [demo_ablation_decoupled.md](demo_ablation_decoupled.md) for the decoupled world).",
        f"Command: `{command}`; {len(seeds)} seed(s), {elapsed / 60:.1f} min wall in this invocation "
        "(steps read back from a previous run cost nothing).",
        "Each seed collects once; every variant trains from the same rollouts with the same "
        + (
            "number of epochs over its own rows (so with different numbers of steps: see each row's steps), "
            if any(s.get("convergence") for s in seeds)
            else "steps, "
        )
        + "random data order and seed. Evaluation: held-out sub-queries ("
        + "; ".join(
            f"seed {s['seed']}: " + ", ".join(f"{n} {t}" for t, n in s["eval_set"].items()) for s in seeds
        )
        + f"), {_modes_text(seeds)}. Shares and EM in %, mean ± std over seeds; plain = `single_hop`, "
        "ambiguous = `single_hop_ambiguous`; P(2 searches) = share of runs with ≥ 2 searches (with "
        "mean@N: of the N runs of every sub-query); the references are evaluated greedily.",
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
    lines += ["", *(uneven_lines(seeds) or conclusions(agg, seeds)), ""]
    lines += mechanism_lines(seeds)
    lines += probe_lines(seeds, img_dir, md_dir)
    lines += follow_lines(seeds)
    lines += other_modes_lines(seeds)
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


def parse_eval_arg(text: str) -> str:
    parse_eval(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
        "--references",
        nargs="*",
        choices=list(REFERENCES),
        default=list(REFERENCES),
        help="reference rows to evaluate (greedy); the untrained student costs a full evaluation "
        "and scores 0 (it answers in prose), so a loaded machine may skip it",
    )
    p.add_argument(
        "--evals",
        nargs="+",
        type=parse_eval_arg,
        default=["mean@4:0.6"],
        help="evaluation modes of every trained student, 'greedy' or 'mean@N:T' (N sampled runs per "
        "sub-query at temperature T); the first is reported as the mechanism. Default: the paper's "
        "mean@4 at the paper configs' executor temperature 0.6 (recipes/configs/paper/eval_base.yaml)",
    )
    p.add_argument(
        "--max_steps",
        type=int,
        default=None,
        help="SFT steps, over the config's value (e.g. 64 to ask whether a longer run learns when to search twice)",
    )
    p.add_argument("--learning_rate", type=float, default=None, help="over the config's, for every variant")
    p.add_argument("--lr_scheduler_type", default=None, help="over the config's, for every variant")
    conv = p.add_argument_group(
        "convergence mode (on with --epochs): epochs instead of steps, the turn-2 probe every "
        "--probe_every steps, a checkpoint there (resumed from when killed), an early stop on a plateau"
    )
    defaults = ConvergenceConfig()
    conv.add_argument("--epochs", type=float, default=None, help="passes over each variant's rows")
    conv.add_argument("--probe_every", type=int, default=defaults.probe_every)
    conv.add_argument(
        "--gathered_loss",
        action=argparse.BooleanOptionalAction,
        default=defaults.gathered_loss,
        help="the CPU fast path's exact loss (SFTScriptArguments.gathered_loss)",
    )
    conv.add_argument(
        "--trainable_layers", type=int, default=None, help="train only the top N decoder layers"
    )
    conv.add_argument("--heldout_rows", type=int, default=defaults.heldout_rows)
    conv.add_argument("--plateau_patience", type=int, default=defaults.plateau_patience)
    conv.add_argument("--plateau_diff", type=float, default=defaults.plateau_diff)
    conv.add_argument("--plateau_loss", type=float, default=defaults.plateau_loss)
    conv.add_argument("--plateau_min_epochs", type=float, default=defaults.plateau_min_epochs)
    conv.add_argument("--no_plateau", action="store_true", help="always train the full --epochs")
    conv.add_argument(
        "--done_dir",
        default=str(REPO / "bench" / "results" / "demo_ablation"),
        help="each finished (variant, seed) result as seed<k>-<variant>.json, read back as done "
        "(commit it to resume on another machine); convergence mode only",
    )
    conv.add_argument(
        "--done_only",
        action="store_true",
        help="tables from the finished units in --done_dir only: a (variant, seed) not there is left "
        "out, and nothing is trained (the seed's collection and reference are still made if missing)",
    )
    conv.add_argument("--img_dir", default=str(REPO / "bench" / "results" / "img"), help="probe PNGs")
    a = p.parse_args(argv)
    if a.done_only and a.epochs is None:
        p.error("--done_only reads --done_dir, which only the convergence mode (--epochs) writes")
    convergence = None
    if a.epochs is not None:
        convergence = ConvergenceConfig(
            epochs=a.epochs,
            probe_every=a.probe_every,
            gathered_loss=a.gathered_loss,
            trainable_layers=a.trainable_layers,
            heldout_rows=a.heldout_rows,
            plateau_patience=a.plateau_patience,
            plateau_diff=a.plateau_diff,
            plateau_loss=a.plateau_loss,
            plateau_min_epochs=a.plateau_min_epochs,
            plateau=not a.no_plateau,
        )
    if convergence is not None:  # a damaged done file is its line now, not after a seed's collection
        for seed in a.seeds:
            for variant in a.variants:
                _done_file_problem(Path(a.done_dir) / f"seed{seed}-{variant}.json")
    command = "python bench/demo_ablation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results_md = Path(a.results)
    results_json = results_md.with_suffix(".json")
    start = time.perf_counter()
    finished: list[dict] = []
    log(f"resumable: to finish (or continue) this run, run again: {command.strip()}")

    img_dir = Path(a.img_dir) if convergence is not None else None

    def write(current: dict | None) -> str:
        seeds = finished + ([current] if current is not None else [])
        if img_dir is not None and current is not None:
            plot_seed(current, img_dir)
        text = render(seeds, command.strip(), time.perf_counter() - start, img_dir, results_md.parent)
        results_md.parent.mkdir(parents=True, exist_ok=True)
        write_text(results_md, text)
        record = {"command": command.strip(), "seeds": seeds, "summary": aggregate(seeds)}
        if seeds:
            c = seeds[-1]["config"]
            record["training"] = {
                **{k: c[k] for k in ("learning_rate", "lr_scheduler_type", "warmup_ratio", "batch_size")},
                **(
                    {"max_steps": c["max_steps"]}
                    if convergence is None
                    else {"convergence": convergence.model_dump()}
                ),
            }
        write_json(results_json, record)
        return text

    for seed in a.seeds:
        overrides: dict[str, Any] = {"seed": seed, "out": str(Path(a.out) / f"seed{seed}")}
        if a.questions:
            overrides["questions"] = a.questions
        if a.max_steps:
            overrides["max_steps"] = a.max_steps
        for name in ("learning_rate", "lr_scheduler_type"):
            if getattr(a, name) is not None:
                overrides[name] = getattr(a, name)
        cfg = load_config(REPO / a.config if not Path(a.config).is_absolute() else a.config, overrides)
        log(f"seed {seed}: variants {' '.join(a.variants)} -> {cfg.out}")
        finished.append(
            run_seed(
                cfg,
                a.variants,
                a.per_type,
                a.evals,
                a.references,
                on_step=write,
                convergence=convergence,
                done_dir=Path(a.done_dir) if convergence is not None else None,
                done_only=a.done_only,
            )
        )
    text = write(None)
    print(text, flush=True)
    log(f"done in {(time.perf_counter() - start) / 60:.1f} min; wrote {results_md} and {results_json}")
    return 0


if __name__ == "__main__":
    run_recipe(main)
