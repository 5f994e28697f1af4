"""Shared advantage (WideSeek-R1) against substitution credit (ours) in multi-agent GRPO, on CPU.

    nice -n 10 python bench/marl_credit.py --sft /work/marl_runs/sft --work /work/marl_runs/bench

From one SFT checkpoint (README command 1's SmolLM2-135M executor), each arm trains the policy as
the sub-agents of the synthetic world's episodes (scripted lead, answerer and, for substitution,
reference executor; BM25) for the same steps on the same hybrid deep + wide batches (the sampler's
seed is fixed), then plays the held-out questions greedily. A `none` arm evaluates the checkpoint
untrained. Per step: mean reward and its within-group standard deviation, failures, trained
tokens, seconds. Held out: EM on text questions, item F1 on table questions, F1 over all, policy
tokens per question, and `gold_found`, the share of sub-agent runs whose searches returned a gold
passage (on the pool too): a reward that rises while it falls did not come from searching. Each
arm's result is saved under `--work/arms/` as it finishes; a rerun skips finished arms (`--redo`
runs them again, from step 0), but adds what a finished arm's figures lack from its saved model
(`complete_finished`).
Writes bench/results/marl_credit.{md,json,png}.

A training arm saves a checkpoint every `--save_every` steps in `--work/out/<arm>/checkpoint-<step>`
(the latest only: weights, optimizer, scheduler, RNG, the Trainer's log and the per-step episode
log), with the settings it trains with beside it. To resume a killed run, run the same command
again: each unfinished arm goes on from its checkpoint, and the arm's json lists the step each
process started at (`starts`). A rerun with other settings than an arm's checkpoint or finished run
was made with is refused in one line before any model loads. `--redo` starts the arms over (to
resume a killed `--redo` run, run it again without `--redo`). `--report_only` writes the results
from the finished arms and the steps an unfinished arm's latest checkpoint logged, while it trains
(in another process); it loads no model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
ARMS = ("none", "shared", "substitution")
NOISE = RESULTS / "marl_gradient_noise.json"


def scripted(world: Path, model: str) -> dict[str, Any]:
    return {"backend": "executor_sft.synthetic.backend:scripted", "model": model, "world": str(world)}


def setup(work: Path, args) -> tuple[Path, Any]:
    """The world (with wide tasks) and its BM25 index, made once."""
    from executor_sft.retrieval import build_index
    from executor_sft.retrieval.config import load_retriever
    from executor_sft.synthetic.world import write_world

    world = work / "world"
    if not (world / "world.json").is_file():
        write_world(
            world, seed=args.world_seed, n_entities=args.entities, n_questions=args.questions, wide_share=0.3
        )
    index = work / "index"
    if not (index / "done").is_file():
        build_index(world / "corpus.jsonl", index, bm25=True)
        (index / "done").write_text("ok\n")
    return world, load_retriever(index, corpus=world / "corpus.jsonl")


def pick(questions, n_deep: int, n_wide: int):
    deep = [q for q in questions if q.answer_format == "text"][:n_deep]
    wide = [q for q in questions if q.answer_format == "table"][:n_wide]
    return deep + wide


def script_args(world: Path, credit: str, args):
    from executor_sft.grpo.marl_train import MARLScriptArguments

    return MARLScriptArguments(
        questions=str(world / "questions_train.jsonl"),  # what the run record fingerprints
        backbone=scripted(world, "backbone"),
        answerer=scripted(world, "answerer"),
        reference=scripted(world, "teacher"),
        credit=credit,
        max_rounds=args.max_rounds,
        max_parallel=args.max_parallel,
        max_turns=args.max_turns,
        retriever={"index": str(world.parent / "index"), "k": 2},
        max_tokens_per_turn=args.max_tokens,
        deep_share=0.5,
        reward_metric="f1",
        loss_rows=args.loss_rows,
        exclude_turn_limit=not args.keep_turn_limit,
        cut_is_context_limit=not args.keep_cut_replies,
    )


def training_args(out: Path, args):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out),
        max_steps=args.steps,
        per_device_train_batch_size=args.questions_per_step * args.generations,
        num_generations=args.generations,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        beta=args.beta,
        loss_type="dapo",
        temperature=1.0,
        logging_steps=1,
        save_strategy="steps",
        save_steps=args.save_every,
        save_total_limit=1,
        report_to="none",
        use_cpu=True,
        bf16=args.bf16,
        seed=args.seed,
        chat_template_kwargs={"enable_thinking": False},
        dataloader_num_workers=0,
    )


def model_args(args):
    from trl import ModelConfig

    return ModelConfig(model_name_or_path=args.sft, dtype="float32")


NOT_IN_IDENTITY = (
    *("work", "arms", "redo", "report_only", "results", "save_every"),  # where and how the bench runs
    *("steps", "loss_rows", "heldout_deep"),  # length, memory, evaluation only
    # in the Trainer's own record
    *("sft", "lr", "beta", "generations", "questions_per_step", "bf16", "seed"),
    "keep_turn_limit",  # in the multi-agent record, as exclude_turn_limit
    "keep_cut_replies",  # in the multi-agent record, as cut_is_context_limit
)


def evaluation_only(args) -> tuple[str, ...]:
    """Settings that choose only what is evaluated. In a screened run the arms train on the saved
    pool, so which table questions are held out is one of them (a pool holding a held-out question
    is refused); without a pool, the held-out tables leave the training questions, so it is not."""
    return ("heldout_wide",) if screened(args) else ()


def screened(args) -> bool:
    return bool(args.screen_deep or args.screen_wide)


def arm_identity(args) -> dict[str, Any]:
    """The bench's settings a resumed arm must share (the world, the pool, the episodes' budgets),
    recorded beside the Trainer's and the multi-agent options in each checkpoint."""
    skip = NOT_IN_IDENTITY + evaluation_only(args)
    return {k: v for k, v in vars(args).items() if k not in skip}


def check_arms(work: Path, world: Path, args) -> None:
    """Before any model loads: a training arm whose checkpoint or finished run was made with other
    settings than this command is refused, in one line naming the folder."""
    from executor_sft.errors import ConfigError
    from executor_sft.grpo.marl_train import marl_record
    from executor_sft.training.checkpoints import last_complete_checkpoint
    from executor_sft.training.run_record import RunRecord, describe_changes, identity_changes

    if args.redo:
        return
    for arm in (a for a in args.arms if a != "none"):
        out = work / "out" / arm
        now = marl_record(
            script_args(world, arm, args), training_args(out, args), model_args(args), arm_identity(args)
        )
        for where in (out, last_complete_checkpoint(out)):
            made = RunRecord.read(where) if where else None
            # a record may hold a key this command counts as evaluation only: compared on neither side
            kept = {k: v for k, v in made.identity.items() if k not in evaluation_only(args)} if made else {}
            if made and (changed := identity_changes(kept, now.identity)):
                raise ConfigError(
                    f"{where}: the {arm} arm was trained with other settings than this command: "
                    f"{describe_changes(changed)}; rerun with those, or add --redo to train the arms from step 0"
                )


def play(model, tokenizer, world: Path, retriever, questions, temperature: float, desc: str, args) -> list:
    """One episode per question with `model` as the sub-agents (the world's scripted lead and answerer)."""
    from executor_sft.grpo.marl import LEAD, POLICY, evaluate_episodes
    from executor_sft.grpo.marl_train import build_role_model
    from executor_sft.llm.base import SamplingParams
    from executor_sft.llm.transformers_backend import TransformersChatModel
    from executor_sft.schema import Role

    sa = script_args(world, "shared", args)
    sampling = SamplingParams(temperature=temperature, max_tokens=args.max_tokens)
    models = {
        POLICY: TransformersChatModel(
            model, tokenizer, name="policy", sampling=sampling, prefix_cache_tokens=0, max_batch_size=16
        ),
        LEAD: build_role_model(sa.backbone, "backbone"),
        Role.ANSWERER: build_role_model(sa.answerer, "answerer"),
    }
    model.eval()
    from executor_sft.safe_interrupt import run_async

    return run_async(evaluate_episodes(questions, models, retriever, sa.settings(None).pipeline, desc=desc))


def evaluate(model, tokenizer, world: Path, retriever, questions, args) -> dict[str, Any]:
    """Greedy held-out episodes with `model` as the sub-agents."""
    from executor_sft.grpo.marl import POLICY

    start = time.perf_counter()
    episodes = play(model, tokenizer, world, retriever, questions, 0.0, "held out", args)
    per_q = []
    for e in episodes:
        runs = e.runs_for(POLICY)
        per_q.append(
            {
                "id": e.question.id,
                "format": e.question.answer_format,
                "em": e.metrics.em,
                "f1": e.metrics.f1,
                "item_f1": e.metrics.item_f1,
                "sub_agents": len(runs),
                "policy_tokens": sum(r.usage.completion_tokens for r in runs),
                "gold_found": gold_found(e),
            }
        )
    return summarise(per_q, time.perf_counter() - start)


def gold_found(episode) -> float | None:
    """Share of the policy's sub-agent runs whose searches returned one of the question's gold
    passages: whether a reward came from searching (None: no run, or no gold passage to find)."""
    from executor_sft.grpo.marl import POLICY

    runs = episode.runs_for(POLICY)
    if not episode.question.positive_doc_ids or not runs:
        return None
    return statistics.fmean(any(gold_returned(episode, s) for s in r.searches) for r in runs)


def gold_returned(episode, search) -> list[str]:
    """The question's gold passages among those one search returned."""
    return sorted(set(episode.question.positive_doc_ids or ()) & set(search.doc_ids))


def mean_of(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def summarise(per_q: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Held-out figures from the per-question ones."""
    text = [q for q in per_q if q["format"] == "text"]
    table = [q for q in per_q if q["format"] == "table"]
    return {
        "seconds": seconds,
        "em_text": statistics.fmean(q["em"] for q in text) if text else None,
        "item_f1_table": statistics.fmean(q["item_f1"] for q in table) if table else None,
        "f1_all": statistics.fmean(q["f1"] for q in per_q),
        "tokens_per_question": statistics.fmean(q["policy_tokens"] for q in per_q),
        "gold_found": mean_of(q.get("gold_found") for q in per_q),
        "per_question": per_q,
    }


def sample_pool(model, tokenizer, world: Path, retriever, questions, args) -> dict[str, dict[str, list]]:
    """F1 and `gold_found` of `--pool_samples` episodes per question sampled at T = 1 with `model`
    as the sub-agents: the training pool's reward, before (the screen) or after training."""
    repeated = [q for q in questions for _ in range(args.pool_samples)]
    episodes = play(model, tokenizer, world, retriever, repeated, 1.0, "pool samples", args)
    out: dict[str, dict[str, list]] = {
        "f1": {q.id: [] for q in questions},
        "found": {q.id: [] for q in questions},
    }
    for e in episodes:
        out["f1"][e.question.id].append(e.metrics.f1)
        out["found"][e.question.id].append(gold_found(e))
    return out


def screen(world: Path, retriever, train_q, args) -> tuple[list, dict[str, Any]]:
    """The training pool: of the first `--screen_deep` text and `--screen_wide` table questions, the
    `--pool_deep` and `--pool_wide` whose sampled rewards under the SFT checkpoint spread the most
    (a group that scores alike gives GRPO no advantage). Saved, so every arm trains on the same pool."""
    path = Path(args.work) / "screen.json"
    if not path.is_file():
        model, tok = _load(args.sft)
        candidates = pick(train_q, args.screen_deep, args.screen_wide)
        start = time.perf_counter()
        sampled = sample_pool(model, tok, world, retriever, candidates, args)
        scores = sampled["f1"]
        ranked = sorted(candidates, key=lambda q: -statistics.pstdev(scores[q.id]))
        pool = [q for q in ranked if q.answer_format == "text"][: args.pool_deep]
        pool += [q for q in ranked if q.answer_format == "table"][: args.pool_wide]
        record = {
            "seconds": time.perf_counter() - start,
            "scores": scores,
            "found": sampled["found"],
            "pool": [q.id for q in pool],
        }
        path.write_text(json.dumps(record, indent=1) + "\n")
    record = json.loads(path.read_text())
    by_id = {q.id: q for q in train_q}
    if held := [i for i in record["pool"] if i not in by_id]:
        from executor_sft.errors import ConfigError

        raise ConfigError(
            f"{path}: the pool holds {', '.join(held)}, which this command holds out; "
            "hold out fewer table questions (--heldout_wide), or screen a new pool in another --work"
        )
    return [by_id[i] for i in record["pool"]], record


def run_arm(arm: str, world: Path, retriever, train_q, held_q, args) -> dict[str, Any]:
    from executor_sft.grpo.episode_log import SavedEpisodeLog
    from executor_sft.grpo.marl_train import run_marl

    result: dict[str, Any] = {"arm": arm}
    if arm == "none":
        model, tok = _load(args.sft)
    else:
        out = Path(args.work) / "out" / arm
        if args.redo:
            shutil.rmtree(out, ignore_errors=True)  # its checkpoints would be resumed
        trainer = run_marl(  # resumes the last complete checkpoint; None: finished before
            script_args(world, arm, args),
            training_args(out, args),
            model_args(args),
            extra_identity=arm_identity(args),
            questions=train_q,
            retriever=retriever,
        )
        # every process's steps, as the run saved them beside its model
        state = json.loads((out / "trainer_state.json").read_text())
        saved = SavedEpisodeLog.read(out) or SavedEpisodeLog()
        steps = [h for h in state["log_history"] if "reward" in h]
        result["steps"] = [{k: h.get(k) for k in h if k in STEP_KEYS or k.startswith("marl/")} for h in steps]
        result["episode_log"] = saved.episode_log
        result["train_s"] = saved.train_seconds
        result["starts"] = saved.starts
        result["s_per_step"] = saved.train_seconds / max(1, state["global_step"])
        print(f"[marl_credit] arm {arm}: trained from steps {saved.starts}", flush=True)
        if trainer is None:
            model, tok = _load(str(out))
        else:
            model, tok = trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class
    result["heldout"] = evaluate(model, tok, world, retriever, held_q, args) if held_q else None
    if screened(args):
        sampled = sample_pool(model, tok, world, retriever, train_q, args)
        result["pool_after"], result["pool_after_found"] = sampled["f1"], sampled["found"]
    return result


def complete_finished(arm: str, world: Path, retriever, train_q, held_q, done: dict[str, Any], args) -> bool:
    """Adds to a finished arm's result (`done`) what this command measures and it lacks, from its
    saved model instead of training it again: the held-out questions it has no figures for (it was
    trained with `--heldout_deep 0`, or, in a screened run, fewer `--heldout_wide` tables) or no
    `gold_found` for, and in a screened run the pool's `gold_found` (the pool is sampled again, F1
    with it). True if anything was added."""
    have = {q["id"]: q for q in (done.get("heldout") or {}).get("per_question", [])}
    missing = [q for q in held_q if "gold_found" not in have.get(q.id, {})]
    pool = screened(args) and "pool_after_found" not in done
    if not missing and not pool:
        return False
    model, tok = _load(args.sft if arm == "none" else str(Path(args.work) / "out" / arm))
    if missing:
        print(
            f"[marl_credit] arm {arm}: evaluating its model on {len(missing)} held-out questions", flush=True
        )
        added = evaluate(model, tok, world, retriever, missing, args)
        have |= {q["id"]: q for q in added["per_question"]}
        seconds = (done.get("heldout") or {}).get("seconds", 0) + added["seconds"]
        done["heldout"] = summarise([have[q.id] for q in held_q], seconds)
    if pool:
        print(f"[marl_credit] arm {arm}: sampling its model on the pool", flush=True)
        sampled = sample_pool(model, tok, world, retriever, train_q, args)
        done["pool_after"], done["pool_after_found"] = sampled["f1"], sampled["found"]
    return True


STEP_KEYS = ("step", "reward", "reward_std", "loss", "grad_norm", "entropy", "step_time", "epoch")


def in_progress(arm: str, out: Path) -> dict[str, Any] | None:
    """An unfinished arm's steps so far, from its latest checkpoint (None before the first)."""
    from executor_sft.grpo.episode_log import SavedEpisodeLog

    ckpts = sorted(out.glob("checkpoint-*"), key=lambda c: int(c.name.rpartition("-")[2]))
    if not ckpts:
        return None
    state = json.loads((ckpts[-1] / "trainer_state.json").read_text())
    saved = SavedEpisodeLog.read(ckpts[-1]) or SavedEpisodeLog()
    steps = [h for h in state["log_history"] if "reward" in h]
    return {
        "arm": arm,
        "in_progress": ckpts[-1].name,
        "steps": [{k: h.get(k) for k in h if k in STEP_KEYS or k.startswith("marl/")} for h in steps],
        "train_s": saved.train_seconds,
        "starts": saved.starts,
        "s_per_step": saved.train_seconds / max(1, state["global_step"]),
        "episode_log": saved.episode_log,
        "heldout": None,
    }


def save_arm(path: Path, arm: dict[str, Any]) -> None:
    """A finished arm's result, whole or not at all (a rerun skips the arms it finds)."""
    from executor_sft.files import atomic_open

    with atomic_open(path) as fh:
        fh.write(json.dumps(arm, indent=1))


def _load(path: str):
    from transformers import AutoModelForCausalLM

    from executor_sft.grpo.policy import load_tokenizer

    return AutoModelForCausalLM.from_pretrained(path, dtype="float32"), load_tokenizer(path)


def paired(a: list[dict], b: list[dict], key: str) -> dict[str, float] | None:
    """Mean of b - a over the same questions, with a 95% t interval."""
    d = [y[key] - x[key] for x, y in zip(a, b, strict=True) if x[key] is not None and y[key] is not None]
    if not d:
        return None
    mean = statistics.fmean(d)
    half = t95(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": len(d)}


def slope(values: list[float]) -> dict[str, float] | None:
    """Least-squares slope of the per-step mean reward, per step, with a 95% t interval."""
    n = len(values)
    if n < 3:
        return None
    xs = list(range(n))
    mx, my = statistics.fmean(xs), statistics.fmean(values)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, values, strict=True)) / sxx
    resid = [y - (my + b * (x - mx)) for x, y in zip(xs, values, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx)
    return {"slope": b, "low": b - t95(n - 2) * se, "high": b + t95(n - 2) * se}


def param_change(before: Path, after: Path) -> dict[str, float]:
    """How far training moved the weights: ||after - before|| / ||before||, and the largest change."""
    from safetensors.torch import load_file

    a, b = load_file(str(before)), load_file(str(after))
    diff = sum(float(((b[k].float() - a[k].float()) ** 2).sum()) for k in a if k in b)
    norm = sum(float((a[k].float() ** 2).sum()) for k in a if k in b)
    top = max(float((b[k].float() - a[k].float()).abs().max()) for k in a if k in b)
    return {"relative_l2": math.sqrt(diff / norm), "max_abs": top}


def t95(dof: int) -> float:
    """Student's t two-sided 95% quantile (the runs are a few steps and a few questions)."""
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm in ("shared", "substitution"):
        steps = results["arms"].get(arm, {}).get("steps") or []
        if not steps:
            continue
        xs = list(range(1, len(steps) + 1))
        ys = [s["reward"] for s in steps]
        sd = [s["reward_std"] for s in steps]
        ax.plot(xs, ys, marker="o", label=f"{arm}: mean reward")
        ax.fill_between(
            xs,
            [y - s for y, s in zip(ys, sd, strict=True)],
            [y + s for y, s in zip(ys, sd, strict=True)],
            alpha=0.2,
        )
    ax.set_xticks(
        range(
            1, 1 + max(len(results["arms"].get(a, {}).get("steps") or []) for a in ("shared", "substitution"))
        )
    )
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("rollout reward (F1; band: within-group std)")
    ax.set_title("Multi-agent GRPO on CPU: shared vs substitution credit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def markdown(results: dict[str, Any]) -> str:
    arms = results["arms"]
    lines = [
        "# Multi-agent GRPO: shared advantage (WideSeek-R1) vs substitution credit (ours)",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Settings: {json.dumps(results['settings'])}",
        "",
        "| arm | steps | s/step | first reward | last reward | mean within-group std | zero-std groups | "
        "held-out EM (text) | held-out item F1 (table) | held-out F1 (all) | policy tokens/q | "
        "held-out runs finding gold |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ARMS:
        a = arms.get(name)
        if a is None:
            continue
        steps = a.get("steps") or []
        h = a["heldout"] or {
            "em_text": None,
            "item_f1_table": None,
            "f1_all": None,
            "tokens_per_question": None,
        }
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        tokens = "-" if h["tokens_per_question"] is None else f"{h['tokens_per_question']:.0f}"
        lines.append(
            f"| {name} | {len(steps)} | {fmt(a.get('s_per_step'))} | "
            f"{fmt(steps[0]['reward']) if steps else '-'} | {fmt(steps[-1]['reward']) if steps else '-'} | "
            f"{fmt(statistics.fmean(s['reward_std'] for s in steps)) if steps else '-'} | "
            f"{fmt(statistics.fmean(s.get('marl/zero_std_groups', 0) for s in steps)) if steps else '-'} | "
            f"{fmt(h['em_text'])} | {fmt(h['item_f1_table'])} | {fmt(h['f1_all'])} | {tokens} | "
            f"{fmt(h.get('gold_found'))} |"
        )
    lines += [
        "",
        "## Per step",
        "",
        "Reward: mean over the step's rollouts after the failure rules; std: mean over groups of the rewards' "
        "standard deviation within the group; zero-std: share of groups whose rollouts all scored the same "
        "(no advantage); per question: mean reward of each question's rollouts, in batch order; failures: "
        "rollouts caught (context limit / turn limit / invalid format / repetition); cut: rollouts with a "
        "reply cut at its token cap, whatever the rules made of it (- where the run did not count them).",
        "",
        "| arm | step | reward | within-group std | zero-std groups | per question | failures c/t/i/r | cut "
        "| sub-agents/q | trained tokens/q | grad norm | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    kinds = ("context_limit", "turn_limit", "invalid_format", "repetition")
    for name in ("shared", "substitution"):
        arm = arms.get(name) or {}
        per_question = arm.get("question_rewards") or []
        for i, st in enumerate(arm.get("steps") or [], start=1):
            f = "/".join(str(int(st.get(f"marl/failures/{k}", 0))) for k in kinds)
            q = " / ".join(f"{r:.3f}" for r in per_question[i - 1]) if i <= len(per_question) else "-"
            cut = int(st["marl/cut_rollouts"]) if "marl/cut_rollouts" in st else "-"
            lines.append(
                f"| {name} | {i} | {st['reward']:.3f} | {st['reward_std']:.3f} | {st.get('marl/zero_std_groups', 0):.2f} "
                f"| {q} | {f} | {cut} | {st.get('marl/sub_agents_per_question', 0):.1f} "
                f"| {st.get('marl/trained_tokens_per_question', 0):.0f} | {st.get('grad_norm') or 0:.3f} "
                f"| {st.get('step_time') or 0:.0f} |"
            )
    moved = [
        f"- {name}: weights moved by {arms[name]['param_change']['relative_l2']:.2e} of their norm "
        f"(largest single change {arms[name]['param_change']['max_abs']:.2e})"
        for name in ("shared", "substitution")
        if name in arms and "param_change" in arms[name]
    ]
    missing = [
        f"- {name}: no finished run in this file (its arm did not complete; the same command again resumes it from its last checkpoint)"
        for name in ("shared", "substitution")
        if name not in arms and name in results.get("arms_asked", ARMS)
    ] + [
        f"- {name}: still training; its steps so far are those its `{arms[name]['in_progress']}` logged "
        f"(of {results['settings']['steps']}), no held-out evaluation yet"
        for name in ("shared", "substitution")
        if (arms.get(name) or {}).get("in_progress")
    ]
    lines += ["", "## Comparison", ""] + results.get("verdict", []) + moved + missing
    return "\n".join(lines) + "\n"


def welch(before: list[float], after: list[float], *, shares: bool = False) -> dict[str, float]:
    """after - before over independent sampled episodes, with a 95% Welch interval. With `shares`
    (values in [0, 1]) the interval is cut to [-1, 1], the only differences two shares can have:
    a t-interval on bounded data can pass them."""
    from scipy.stats import ttest_ind

    diff = statistics.fmean(after) - statistics.fmean(before)
    ci = ttest_ind(after, before, equal_var=False).confidence_interval(0.95)
    low, high = float(ci.low), float(ci.high)
    if shares:
        low, high = max(low, -1.0), min(high, 1.0)
    return {"mean": diff, "low": low, "high": high, "n": len(after)}


def pool_scores(results: dict[str, Any]) -> tuple[list[float], dict[str, list[float]]] | None:
    """The training pool's sampled F1s before training (the screen) and after each arm that has them."""
    pool = results.get("pool")
    if not pool:
        return None

    def flat(scores: dict[str, list[float]]) -> list[float]:
        return [v for i in pool["pool"] for v in scores[i]]

    after = {
        name: flat(a["pool_after"])
        for name in ARMS
        if (a := results["arms"].get(name) or {}).get("pool_after")
    }
    return flat(pool["scores"]), after


def pool_lines(results: dict[str, Any]) -> list[str]:
    """The training pool's sampled F1 before (the screen) and after each arm, and between the rules."""
    if not (scores := pool_scores(results)):
        return []
    before, after = scores
    found = results["pool"].get("found")
    out = [
        f"- training pool {results['pool']['pool']}: sampled F1 before training {statistics.fmean(before):.3f}"
        + (f"; the sub-agents' searches found a gold passage in {found_share(found)}" if found else "")
    ]
    for name, scores in after.items():
        w = welch(before, scores)
        found = results["arms"][name].get("pool_after_found")
        out.append(
            f"- training pool, {name}: sampled F1 after {statistics.fmean(scores):.3f}, minus before "
            f"{w['mean']:+.3f} (95% Welch interval {w['low']:+.3f} to {w['high']:+.3f}, {w['n']} episodes)"
            + (f"; its sub-agents' searches found a gold passage in {found_share(found)}" if found else "")
        )
    untrained = (results["arms"].get("none") or {}).get("pool_after_found")
    for name in ("shared", "substitution"):
        trained = (results["arms"].get(name) or {}).get("pool_after_found")
        if untrained and trained:
            a, b = ([v for vs in f.values() for v in vs if v is not None] for f in (untrained, trained))
            w = welch(a, b, shares=True)
            out.append(
                f"- training pool, {name} minus none: share of sub-agent runs whose searches found a gold "
                f"passage {w['mean']:+.2f} (95% Welch interval {w['low']:+.2f} to {w['high']:+.2f}, "
                f"{len(a)} and {len(b)} episodes): where the reward came from"
            )
    if w := rule_gaps(results).get(POOL_GAP):
        out.append(
            f"- training pool, substitution minus shared after training: {w['mean']:+.3f} "
            f"(95% Welch interval {w['low']:+.3f} to {w['high']:+.3f}, "
            f"{len(after['substitution'])} and {len(after['shared'])} episodes)"
        )
    return out


def found_share(found: dict[str, list[float | None]]) -> str:
    """`gold_found` over the pool's sampled episodes, per question and over all, in words."""
    per_q = {i: mean_of(v) for i, v in found.items()}
    shown = ", ".join(f"{i} {v:.2f}" if v is not None else f"{i} -" for i, v in per_q.items())
    overall = mean_of(v for vs in found.values() for v in vs)
    return f"{overall:.2f} of its runs ({shown})" if overall is not None else "- of its runs"


POOL_GAP = "the pool's sampled F1 after training"


def rule_gaps(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Substitution minus shared on what the comparison is decided by: the pool's sampled F1 after
    training (Welch) and held-out F1 (paired over questions), where the run has them."""
    gaps = {}
    if (scores := pool_scores(results)) and {"shared", "substitution"} <= scores[1].keys():
        gaps[POOL_GAP] = welch(scores[1]["shared"], scores[1]["substitution"])
    held = {name: a["heldout"]["per_question"] for name, a in results["arms"].items() if a.get("heldout")}
    if {"shared", "substitution"} <= held.keys() and (
        p := paired(held["shared"], held["substitution"], "f1")
    ):
        gaps["held-out F1"] = p
    return gaps


def winner_line(results: dict[str, Any]) -> list[str]:
    """Which rule won: the one every interval that excludes 0 favours; none if all span 0."""
    gaps = rule_gaps(results)
    if not gaps:
        return []
    favoured = {
        "substitution" if g["low"] > 0 else "shared" for g in gaps.values() if g["low"] > 0 or g["high"] < 0
    }
    if len(favoured) == 1:
        head = favoured.pop()
    else:
        head = "the measures disagree" if favoured else "neither (every interval spans 0)"
    shown = "; ".join(
        f"{name} {g['mean']:+.3f} (95% interval {g['low']:+.3f} to {g['high']:+.3f})"
        for name, g in gaps.items()
    )
    return [f"- which rule won: {head}. Substitution minus shared: {shown}; one run per rule"]


def question_rewards(entry: dict[str, Any]) -> list[float]:
    """Mean reward of each group (one question's rollouts) of a step, in batch order."""
    by_group: dict[tuple, list[float]] = {}
    for reward, group in zip(entry["rewards"], entry["groups"], strict=True):
        by_group.setdefault(tuple(group), []).append(reward)
    return [statistics.fmean(v) for v in by_group.values()]


def step_rewards(episode_log: list[dict[str, Any]]) -> list[list[float]]:
    """Each logged step's rollout rewards, in step order (steps with no rollouts left out)."""
    return [e["rewards"] for e in episode_log if e.get("rewards")]


def step_changes(name: str, episode_log: list[dict[str, Any]]) -> list[str]:
    """Step 1's rollout rewards against step 2's (the first update's), the best step's and the last
    step's (a curve that rises and falls back has no slope to speak of), with 95% Welch intervals
    over the rollouts; a step that is several of these is given once, under its first label."""
    rewards = step_rewards(episode_log)
    if len(rewards) < 2:
        return []
    best = max(range(1, len(rewards)), key=lambda i: statistics.fmean(rewards[i]))
    labels: dict[int, str] = {}
    for label, i in (
        ("after one update", 1),
        ("highest (picked after the fact)", best),
        ("last", len(rewards) - 1),
    ):
        labels.setdefault(i, label)
    out = []
    for i, label in labels.items():
        w = welch(rewards[0], rewards[i])
        out.append(
            f"- {name}: mean rollout reward at step 1 {statistics.fmean(rewards[0]):.3f}, {label} at step {i + 1} "
            f"{statistics.fmean(rewards[i]):.3f}: {w['mean']:+.3f} (95% Welch interval over the rollouts "
            f"{w['low']:+.3f} to {w['high']:+.3f}, {len(rewards[0])} and {w['n']} rollouts)"
        )
    return out


def arm_differences(arms: dict[str, Any]) -> list[str]:
    """Substitution minus shared at each step both arms logged, with 95% Welch intervals over the
    rollouts. Both start from the same weights on the same batches, so step 1 differs by sampling
    alone and step 2 is the first that each credit rule's update shaped."""
    logs = [
        step_rewards((arms.get(name) or {}).get("episode_log") or []) for name in ("shared", "substitution")
    ]
    out = []
    for step, (a, b) in enumerate(zip(*logs, strict=False), start=1):  # the steps both logged
        w = welch(a, b)
        out.append(
            f"- step {step}, substitution minus shared: mean rollout reward {statistics.fmean(b):.3f} against "
            f"{statistics.fmean(a):.3f}, {w['mean']:+.3f} (95% Welch interval {w['low']:+.3f} to "
            f"{w['high']:+.3f}, {len(a)} and {len(b)} rollouts)"
            + (" (the same weights: sampling alone)" if step == 1 else "")
        )
    return out


def verdict(results: dict[str, Any]) -> list[str]:
    arms = results["arms"]
    out = winner_line(results) + pool_lines(results)
    rose = False
    for name in ("shared", "substitution"):
        steps = (arms.get(name) or {}).get("steps") or []
        s = slope([x["reward"] for x in steps])
        if s:
            moved = s["low"] > 0 or s["high"] < 0
            rose = rose or s["low"] > 0
            out.append(
                f"- {name}: reward slope {s['slope']:+.4f}/step (95% interval {s['low']:+.4f} to {s['high']:+.4f}): "
                + ("moved" if moved else "no movement distinguishable from zero")
            )
    for name in ("shared", "substitution"):
        out += step_changes(name, (arms.get(name) or {}).get("episode_log") or [])
    out += arm_differences(arms)
    noise = json.loads(NOISE.read_text()) if NOISE.is_file() else None
    rollouts = noise and noise["settings"]["questions_per_step"] * noise["settings"]["generations"]
    this_run = results["settings"]["questions_per_step"] * results["settings"]["generations"]
    if not rose and rollouts == this_run:  # why, as bench/marl_gradient_noise.py measured it at this size
        out += [
            f"- why no reward rose (bench/results/marl_gradient_noise.md): at the SFT checkpoint, one step of "
            f"{rollouts} rollouts on the pool is {r['noise_over_signal']:.1f} times noise over signal under {name} "
            f"(leave one batch out: {r['jackknife']['min']:.1f} to {r['jackknife']['max']:.1f})"
            for name, r in noise["arms"].items()
        ]
    held = {name: a["heldout"]["per_question"] for name, a in arms.items() if a.get("heldout")}
    if "shared" in held and "substitution" in held:
        a, b = held["shared"], held["substitution"]
        for key in ("f1", "em"):
            p = paired(a, b, key)
            if p:
                out.append(
                    f"- held-out {key}, substitution minus shared: {p['mean']:+.3f} "
                    f"(95% interval {p['low']:+.3f} to {p['high']:+.3f}, {p['n']} questions)"
                )
    if "none" in held:
        for name in ("shared", "substitution"):
            if name in held:
                p = paired(held["none"], held[name], "f1")
                if p:
                    out.append(
                        f"- held-out F1, {name} minus no RL: {p['mean']:+.3f} "
                        f"(95% interval {p['low']:+.3f} to {p['high']:+.3f})"
                    )
    return out


def parser(doc: str = __doc__) -> argparse.ArgumentParser:
    """The bench's flags; bench/marl_gradient_noise.py reads the same world, pool and rollout settings."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sft", required=True, help="The SFT checkpoint directory (README command 1's output).")
    p.add_argument("--work", default="/work/marl_runs/bench")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--questions_per_step", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--max_tokens", type=int, default=96)
    p.add_argument("--max_rounds", type=int, default=2)
    p.add_argument("--max_parallel", type=int, default=3)
    p.add_argument("--max_turns", type=int, default=3)
    p.add_argument("--entities", type=int, default=300)
    p.add_argument("--questions", type=int, default=160)
    p.add_argument("--world_seed", type=int, default=0)
    p.add_argument(
        "--seed", type=int, default=0, help="The Trainer's seed (rollout sampling): another run of each arm."
    )
    p.add_argument("--heldout_deep", type=int, default=8)
    p.add_argument("--heldout_wide", type=int, default=4)
    p.add_argument(
        "--loss_rows", type=int, default=2, help="Rows per forward and backward of the loss (memory)."
    )
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for the loss (CPUs with native bf16).")
    p.add_argument(
        "--screen_deep", type=int, default=0, help="Text questions screened for the pool (0: no pool)."
    )
    p.add_argument("--screen_wide", type=int, default=0, help="Table questions screened for the pool.")
    p.add_argument(
        "--pool_deep", type=int, default=1, help="Text questions kept: every step trains on the pool."
    )
    p.add_argument("--pool_wide", type=int, default=1, help="Table questions kept.")
    p.add_argument(
        "--pool_samples", type=int, default=8, help="Sampled episodes per pool question, before and after."
    )
    p.add_argument(
        "--save_every", type=int, default=1, help="Steps between checkpoints (a rerun resumes the latest)."
    )
    p.add_argument(
        "--keep_turn_limit",
        action="store_true",
        help="Keep rollouts past a turn limit in the loss, at their outcome reward (App. A drops them).",
    )
    p.add_argument(
        "--keep_cut_replies",
        action="store_true",
        help="A reply cut at --max_tokens stays in the loss, judged by its format and outcome, instead of "
        "counting as past the context limit (which leaves the loss).",
    )
    p.add_argument("--redo", action="store_true", help="Train the arms again from step 0.")
    p.add_argument(
        "--report_only",
        action="store_true",
        help="Results from the finished arms and the running arms' latest checkpoints; trains nothing.",
    )
    p.add_argument("--results", default=str(RESULTS / "marl_credit"))
    return p


def train_questions(
    work: Path, args, ready: tuple[Path, Any] | None = None
) -> tuple[Path, Any, list, list, dict[str, Any] | None]:
    """The world, its retriever (`ready`: as `setup` made them), the training questions (the
    screened pool when asked for), the held-out questions and the pool's screening record."""
    from executor_sft.grpo.marl_train import load_questions

    (work / "arms").mkdir(parents=True, exist_ok=True)
    world, retriever = ready or setup(work, args)
    # the world's test split holds few or no wide tasks: the held-out wide ones are the train split's
    # last `heldout_wide`, never trained on
    train_all = load_questions(str(world / "questions_train.jsonl"))
    held_wide = (
        [q for q in train_all if q.answer_format == "table"][-args.heldout_wide :]
        if args.heldout_wide
        else []
    )
    held_ids = {q.id for q in held_wide}
    train_q = [q for q in train_all if q.id not in held_ids]
    held_q = pick(load_questions(str(world / "questions_test.jsonl")), args.heldout_deep, 0) + held_wide
    pool_record = None
    if screened(args):
        train_q, pool_record = screen(world, retriever, train_q, args)
        print(f"[marl_credit] pool: {pool_record['pool']}", flush=True)
    return world, retriever, train_q, held_q, pool_record


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    work = Path(args.work)
    ready = setup(work, args)
    if not args.report_only:
        check_arms(work, ready[0], args)  # before the screen or any arm loads a model
    elif not (work / "screen.json").is_file() and screened(args):
        from executor_sft.errors import ConfigError

        raise ConfigError(
            f"{work / 'screen.json'}: missing; --report_only reads a run that has screened its pool"
        )
    world, retriever, train_q, held_q, pool_record = train_questions(work, args, ready)
    arms: dict[str, Any] = {}
    for arm in args.arms:
        path = work / "arms" / f"{arm}.json"
        if path.is_file() and not args.redo:
            arms[arm] = json.loads(path.read_text())
            if not args.report_only and complete_finished(
                arm, world, retriever, train_q, held_q, arms[arm], args
            ):
                save_arm(path, arms[arm])
            continue
        if args.report_only:
            if arm != "none" and (partial := in_progress(arm, work / "out" / arm)):
                arms[arm] = partial
            continue
        print(f"[marl_credit] arm {arm} ...", flush=True)
        arms[arm] = run_arm(arm, world, retriever, train_q, held_q, args)
        save_arm(path, arms[arm])
        print(
            f"[marl_credit] arm {arm} done: {json.dumps((arms[arm]['heldout'] or {}) | {'per_question': '...'})}",
            flush=True,
        )
    settings = {
        k: v for k, v in vars(args).items() if k not in ("redo", "report_only", "results", "arms", "work")
    }
    settings |= {"train_questions": len(train_q), "heldout_questions": len(held_q)}
    results = {
        "command": "python bench/marl_credit.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": settings,
        "load_average": os.getloadavg(),
        "arms_asked": args.arms,
        "arms": arms,
    }
    if pool_record is not None:
        results["pool"] = pool_record
    for arm in ("shared", "substitution"):
        trained = work / "out" / arm / "model.safetensors"
        if arm in arms and trained.is_file() and not arms[arm].get("in_progress"):
            arms[arm]["param_change"] = param_change(Path(args.sft) / "model.safetensors", trained)
    for arm in arms.values():
        if arm.get("episode_log"):
            arm["question_rewards"] = [question_rewards(e) for e in arm["episode_log"] if e.get("rewards")]
    results["verdict"] = verdict(results)
    out = Path(args.results)
    out.parent.mkdir(parents=True, exist_ok=True)
    slim = {
        **results,
        "arms": {k: {kk: vv for kk, vv in v.items() if kk != "episode_log"} for k, v in arms.items()},
    }
    out.with_suffix(".json").write_text(json.dumps(slim, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results))
    if any(arms.get(a, {}).get("steps") for a in ("shared", "substitution")):
        plot(results, out.with_suffix(".png"))  # no curve, no figure
    print("\n".join(results["verdict"]))
    return 0


if __name__ == "__main__":
    from executor_sft.recipe_main import run_recipe

    run_recipe(main)  # a user's mistake is one `error:` line, exit 2; a bug keeps its traceback
