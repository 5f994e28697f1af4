"""After SFT on the CPU demo (issue #27): on-policy distillation, then GRPO [outcome, clp_em], measured.

    nohup python bench/post_training_bench.py --seeds 1 > bench/post_training.log 2>&1 &

Per seed, on the synthetic world of `recipes/demo.py` (world, index and collection made once,
as `bench/demo_ablation.py` makes them, whose functions this script reuses):

- TEACHER: SmolLM2-135M SFT-trained on every correct teacher run (the ablation's variant (a)).
  Its rows keep the scripted teacher's needless second searches, so it searches twice nearly
  always, including where a second search is needed (the ambiguous sub-queries): the strongest
  searcher the demo's step budget makes, with the student's tokenizer.
- STUDENT: the demo's SFT executor (variant (c), the full filter), same steps and seed.
- DISTILL: `executor_sft.distill.run_distill` (what `recipes/distill_executor.py` runs) from the
  student, reverse KL (beta 1) against the teacher, prompts = the seed's verified teacher
  sub-queries (train split), the search tool over the world's BM25 index.
- GRPO: `executor_sft.grpo.run_grpo` from the distilled model, `reward_funcs [outcome, clp_em]`
  weighted [1.0, 0.5] (`grpo_cpu.yaml`'s), the world's scripted answerer.

After each stage the model is evaluated on the same balanced held-out sub-queries (greedy,
the demo's prompt and budget): EM, searches per sub-query and P(2 searches) by type (plain =
`single_hop`, ambiguous = `single_hop_ambiguous`), and the teacher KL: the reverse KL
KL(student || teacher) per assistant token (full vocabulary, temperature 1), on the
model's own greedy held-out episodes, tool-result and prompt tokens excluded.

Resumable per (seed, stage): each stage writes `result.json` with the settings it was made
with (and keeps its checkpoint); a re-run with the same settings reads it back. Results
(markdown + JSON) are rewritten after every finished stage, with the load average.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_ablation as ablation  # noqa: E402  (the sibling bench script: world, collection, SFT variants)

from executor_sft.demos.demo import DemoConfig, _student_model, evaluate, load_config  # noqa: E402
from executor_sft.demos.sample_data import ROLLOUTS, provenance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "recipes" / "configs" / "demo.yaml"
PLAIN, AMBIGUOUS = ablation.PLAIN, ablation.AMBIGUOUS
TEACHER_VARIANT, STUDENT_VARIANT = "a", "c"
STAGES = {
    "teacher": "teacher: SFT on every correct run (a)",
    "sft": "student: SFT, full filter (c)",
    "distill": "student after distillation",
    "grpo": "student after distillation + GRPO",
}
METRICS = (
    ("teacher_kl", "teacher KL / token", 1.0),
    ("em", "EM", 100.0),
    (f"em:{PLAIN}", "EM plain", 100.0),
    (f"em:{AMBIGUOUS}", "EM ambiguous", 100.0),
    (f"searches:{PLAIN}", "searches plain", 1.0),
    (f"searches:{AMBIGUOUS}", "searches ambiguous", 1.0),
    (f"p2:{PLAIN}", "P(2 searches) plain", 100.0),
    (f"p2:{AMBIGUOUS}", "P(2 searches) ambiguous", 100.0),
)


def log(msg: str) -> None:
    print(f"[post-training] {msg}", file=sys.stderr, flush=True)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min, {os.cpu_count()} CPUs)"


# ------------------------------------------------------------------------------------------
# measurements
# ------------------------------------------------------------------------------------------


def searches_by_type(runs_path: Path, sub_queries: list) -> dict[str, float]:
    """Mean searches per sub-query, overall and per type, from the evaluation's per-run JSONL."""
    types = {q.id: ablation._type_of(q) for q in sub_queries}
    groups: dict[str, list[int]] = {}
    for line in runs_path.read_text(encoding="utf-8").splitlines():
        score = json.loads(line)["score"]
        groups.setdefault(types.get(score["id"]) or "untyped", []).append(score["n_searches"])
    out = {"searches": statistics.mean(n for xs in groups.values() for n in xs)}
    out.update({f"searches:{t}": statistics.mean(xs) for t, xs in groups.items()})
    return out


def _chat_messages(messages: list[dict]) -> list[dict]:
    """A recorded run's messages reduced to the chat-template keys (as the SFT rows hold them)."""
    out = []
    for m in messages:
        item = {"role": m["role"], "content": m.get("content") or ""}
        if m["role"] == "assistant" and m.get("tool_calls"):
            item["tool_calls"] = [
                {"type": "function", "function": {"name": c["function"]["name"], "arguments": _args(c)}}
                for c in m["tool_calls"]
            ]
        if m["role"] == "tool" and m.get("tool_call_id"):
            item["tool_call_id"] = m["tool_call_id"]
        out.append(item)
    return out


def _args(call: dict) -> Any:
    """The call's arguments as the row holds them; a sampled string that is not JSON (a malformed
    call the executor corrected) stays the string the model wrote."""
    args = call["function"].get("arguments")
    if not isinstance(args, str):
        return args
    try:
        return json.loads(args)
    except json.JSONDecodeError:
        return args


def teacher_kl(student_dir: str, teacher_dir: str, runs_path: Path, show_progress: bool = True) -> dict:
    """Reverse KL(student || teacher) per assistant token on the student's own recorded episodes.

    Each episode is rendered with the student's training template (`sft.render_row`, the
    rendering SFT trains on); only the tokens the executor wrote (its tool calls, report and
    end-of-turn) count, never the prompt or the retrieved passages.
    """
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from executor_sft.filters.pipeline import offered_tools
    from executor_sft.sft.render import IGNORE_INDEX, render_row, tokenize_rendered

    tok = AutoTokenizer.from_pretrained(student_dir)
    student = AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32).eval()
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).eval()
    total, tokens, episodes, skipped = 0.0, 0, 0, 0
    lines = runs_path.read_text(encoding="utf-8").splitlines()
    for line in tqdm(lines, desc="teacher KL", disable=not show_progress):
        run = json.loads(line)["run"]
        messages = _chat_messages(run["messages"])
        if not any(m["role"] == "assistant" for m in messages):
            skipped += 1
            continue
        rendered = render_row(messages, offered_tools(run.get("calls")), tok)
        enc = tokenize_rendered(rendered, tok)
        ids = torch.tensor([enc["input_ids"]])
        labels = torch.tensor(enc["labels"])
        # Position i predicts token i + 1: the distributions over each assistant token.
        where = (labels[1:] != IGNORE_INDEX).nonzero().squeeze(-1)
        if where.numel() == 0:
            skipped += 1
            continue
        with torch.inference_mode():
            log_s = torch.log_softmax(student(ids).logits[0, :-1][where].float(), -1)
            log_t = torch.log_softmax(teacher(ids).logits[0, :-1][where].float(), -1)
        kl = (log_s.exp() * (log_s - log_t)).sum(-1)
        total += kl.sum().item()
        tokens += int(where.numel())
        episodes += 1
    del student, teacher
    return {
        "teacher_kl": total / max(tokens, 1),
        "kl_tokens": tokens,
        "kl_episodes": episodes,
        "kl_skipped": skipped,
    }


# ------------------------------------------------------------------------------------------
# stages
# ------------------------------------------------------------------------------------------


def _retriever_mapping(cfg: DemoConfig, index_dir: Path) -> dict:
    return {"index": str(index_dir), "kind": "bm25", "k": cfg.top_k}


def distill(
    cfg: DemoConfig, bench: dict, out: Path, student: Path, teacher: Path, index_dir: Path, target: Path
):
    from trl import DistillationConfig, ModelConfig

    from executor_sft.distill import DistillScriptArguments, run_distill

    script_args = DistillScriptArguments(
        rollouts=[str(out / ROLLOUTS)],
        retriever=_retriever_mapping(cfg, index_dir),
        max_searches=cfg.max_turns - 1,
    )
    args = DistillationConfig(
        output_dir=str(target),
        teacher_model_name_or_path=str(teacher),
        beta=1.0,
        temperature=1.0,
        max_completion_length=bench["max_completion_length"],
        chat_template_kwargs={"enable_thinking": False},
        max_steps=bench["distill_steps"],
        per_device_train_batch_size=bench["batch_size"],
        gradient_accumulation_steps=1,
        learning_rate=bench["distill_lr"],
        lr_scheduler_type="constant",
        bf16=False,
        use_cpu=True,
        use_vllm=False,
        gradient_checkpointing=False,
        dataloader_pin_memory=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        disable_tqdm=True,
    )
    trainer = run_distill(script_args, args, ModelConfig(model_name_or_path=str(student), dtype="float32"))
    return [
        {
            k: h[k]
            for k in ("step", "distill/teacher_kl", "distill/searches", "distill/report", "loss")
            if k in h
        }
        for h in trainer.state.log_history
        if "distill/teacher_kl" in h
    ]


def grpo(cfg: DemoConfig, bench: dict, out: Path, start: Path, index_dir: Path, target: Path):
    from trl import GRPOConfig, ModelConfig

    from executor_sft.grpo.train import GRPOScriptArguments, run_grpo

    script_args = GRPOScriptArguments(
        rollouts=[str(out / ROLLOUTS)],
        retriever=_retriever_mapping(cfg, index_dir),
        max_searches=cfg.max_turns - 1,
        reward_funcs=["outcome", "clp_em"],
        answerer={
            "factory": "executor_sft.synthetic.scripted_answerer:world_answerer",
            "world": str(out / "world"),
        },
    )
    args = GRPOConfig(
        output_dir=str(target),
        max_steps=bench["grpo_steps"],
        num_generations=bench["num_generations"],
        per_device_train_batch_size=bench["batch_size"] * bench["num_generations"],
        gradient_accumulation_steps=1,
        learning_rate=bench["grpo_lr"],
        lr_scheduler_type="constant",
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        reward_weights=[1.0, 0.5],
        max_completion_length=bench["max_completion_length"],
        temperature=1.0,
        chat_template_kwargs={"enable_thinking": False},
        bf16=False,
        use_cpu=True,
        use_vllm=False,
        gradient_checkpointing=False,
        dataloader_pin_memory=False,
        logging_steps=1,
        log_completions=False,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        disable_tqdm=True,
    )
    trainer = run_grpo(script_args, args, ModelConfig(model_name_or_path=str(start), dtype="float32"))
    keys = ("step", "reward", "rewards/outcome/mean", "rewards/clp_em/mean", "executor/tool_calls", "loss")
    return [{k: h[k] for k in keys if k in h} for h in trainer.state.log_history if "reward" in h]


def measure(cfg, model_dir: Path, teacher_dir: Path, retriever, sub_queries, label, stage_dir, show_progress):
    """Evaluate `model_dir` on the held-out sample, then its teacher KL on those episodes."""
    seconds = {}
    t = time.perf_counter()
    runs = stage_dir / "eval.jsonl"
    model = _student_model(cfg, str(model_dir))
    result = evaluate(cfg, model, retriever, sub_queries, label, runs, show_progress)
    model.close()
    summary = {**ablation._summary(result, runs, sub_queries), **searches_by_type(runs, sub_queries)}
    seconds["eval"] = time.perf_counter() - t
    t = time.perf_counter()
    summary.update(teacher_kl(str(model_dir), str(teacher_dir), runs, show_progress))
    seconds["teacher_kl"] = time.perf_counter() - t
    return summary, seconds


def _train_variant(variant: str, config: dict, per_type: int) -> None:
    """One SFT variant with its held-out evaluation (`demo_ablation.run_variant`), in a child process."""
    cfg = DemoConfig.model_validate(config)
    out = Path(cfg.out)
    _, retriever, _, _ = ablation.prepare_seed(cfg, out, show_progress=False)
    sub_queries = ablation.balanced_subqueries(out / "world" / "subqueries_test.jsonl", per_type)
    ablation.run_variant(variant, cfg, out, retriever, sub_queries, show_progress=False)


def _variant_result(out: Path, variant: str) -> Path:
    """Where `demo_ablation.run_variant` saves a variant's greedy held-out evaluation."""
    return out / f"variant-{variant}" / ablation.eval_dir(ablation.GREEDY) / ablation.RESULT


def _variant_done(out: Path, variant: str) -> bool:
    """Trained, evaluated and its checkpoint kept: `run_variant` then only reads it back."""
    var_dir = out / f"variant-{variant}"
    return all(
        f.exists()
        for f in (
            var_dir / ablation.TRAINED,
            _variant_result(out, variant),
            var_dir / "student-sft" / "config.json",
        )
    )


def run_seed(
    cfg: DemoConfig,
    bench: dict,
    *,
    parallel_sft: bool = True,
    report_only: bool = False,
    show_progress: bool = True,
    on_step=None,
) -> dict[str, Any]:
    """One seed, stage by stage; `report_only` reads back the finished stages and runs nothing."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    world, retriever, index_dir, collect_seconds = ablation.prepare_seed(cfg, out, show_progress)
    sub_queries = ablation.balanced_subqueries(out / "world" / "subqueries_test.jsonl", bench["per_type"])
    eval_ids = [q.id for q in sub_queries]
    partial: dict[str, Any] = {
        "seed": cfg.seed,
        "config": cfg.model_dump(),
        "bench": bench,
        "provenance": provenance(cfg, index_dir),
        "eval_set": {t: sum(ablation._type_of(q) == t for q in sub_queries) for t in ablation.TYPES},
        "seconds": {
            "world+collect": sum(collect_seconds.values()) if isinstance(collect_seconds, dict) else 0
        },
        "stages": {},
    }
    ckpts = {
        "teacher": out / f"variant-{TEACHER_VARIANT}" / "student-sft",
        "sft": out / f"variant-{STUDENT_VARIANT}" / "student-sft",
    }
    variants = {"teacher": TEACHER_VARIANT, "sft": STUDENT_VARIANT}
    sft_results: dict[str, dict | None] = {}
    if report_only:
        for stage, variant in variants.items():
            sft_results[stage] = (
                ablation.run_variant(variant, cfg, out, retriever, sub_queries, show_progress=False)
                if _variant_done(out, variant)
                else None
            )
    else:
        for stage, variant in variants.items():
            if not (ckpts[stage] / "config.json").exists():
                _variant_result(out, variant).unlink(missing_ok=True)  # redo: no checkpoint
        teacher_job = None
        if parallel_sft and not _variant_done(out, TEACHER_VARIANT):
            # The two SFT runs are independent: the teacher's trains in a second process meanwhile.
            teacher_job = multiprocessing.get_context("spawn").Process(
                target=_train_variant, args=(TEACHER_VARIANT, cfg.model_dump(), bench["per_type"])
            )
            teacher_job.start()
            log(
                f"seed {cfg.seed}: training the teacher (variant {TEACHER_VARIANT}) in process {teacher_job.pid}"
            )
        for stage in ("sft", "teacher"):
            if stage == "teacher" and teacher_job is not None:
                teacher_job.join()
                if teacher_job.exitcode != 0:
                    raise RuntimeError(f"the teacher's SFT process failed (exit code {teacher_job.exitcode})")
            sft_results[stage] = ablation.run_variant(
                variants[stage], cfg, out, retriever, sub_queries, show_progress=show_progress
            )
    for stage in ("teacher", "sft"):
        if (res := sft_results.get(stage)) is not None:
            partial["stages"][stage] = {k: res[k] for k in ("sft_rows", "seconds", "eval")}
    if len(partial["stages"]) < 2:
        return partial
    teacher = ckpts["teacher"]
    previous = ckpts["sft"]
    for stage in ("teacher", "sft"):
        stage_dir = out / f"measure-{stage}"
        key = {"config": cfg.model_dump(), "eval_ids": eval_ids, "stage": stage}
        if (done := ablation._done(stage_dir / ablation.RESULT, key)) is None:
            if report_only:
                continue
            log(f"seed {cfg.seed}: teacher KL of the {stage} model")
            t = time.perf_counter()
            runs = _variant_result(out, variants[stage]).with_name("eval.jsonl")
            extra = {
                **searches_by_type(runs, sub_queries),
                **teacher_kl(str(ckpts[stage]), str(teacher), runs),
            }
            done = ablation._save(
                stage_dir / ablation.RESULT, {"key": key, "extra": extra, "seconds": time.perf_counter() - t}
            )
        partial["stages"][stage]["eval"].update(done["extra"])
        partial["stages"][stage]["seconds"]["teacher_kl"] = done["seconds"]
        if on_step:
            on_step(partial)
    for stage in ("distill", "grpo"):
        stage_dir = out / stage
        target = stage_dir / "model"
        key = {"config": cfg.model_dump(), "bench": bench, "eval_ids": eval_ids, "stage": stage}
        done = ablation._done(stage_dir / ablation.RESULT, key)
        if done is None or not (target / "config.json").exists():
            if report_only:
                break
            shutil.rmtree(stage_dir, ignore_errors=True)
            stage_dir.mkdir(parents=True)
            log(f"seed {cfg.seed}: {stage} from {previous}")
            t = time.perf_counter()
            if stage == "distill":
                logs = distill(cfg, bench, out, previous, teacher, index_dir, target)
            else:
                logs = grpo(cfg, bench, out, previous, index_dir, target)
            seconds = {"train": time.perf_counter() - t}
            summary, eval_seconds = measure(
                cfg, target, teacher, retriever, sub_queries, STAGES[stage], stage_dir, show_progress
            )
            seconds.update(eval_seconds)
            done = ablation._save(
                stage_dir / ablation.RESULT,
                {"key": key, "train_logs": logs, "eval": summary, "seconds": seconds},
            )
            log(f"seed {cfg.seed}: {stage} done: {_line(summary)}")
        partial["stages"][stage] = {k: done[k] for k in ("train_logs", "eval", "seconds")}
        previous = target
        if on_step:
            on_step(partial)
    return partial


def _line(summary: dict) -> str:
    return ", ".join(
        f"{label} {summary[key] * scale:.{0 if scale == 100.0 else 3}f}"
        for key, label, scale in METRICS
        if key in summary
    )


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def _cell(values: list[float], scale: float) -> str:
    if not values:
        return "-"
    values = [v * scale for v in values]
    digits = 1 if scale == 100.0 else 3
    mean = statistics.mean(values)
    std = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{mean:.{digits}f}{std}"


def aggregate(seeds: list[dict]) -> dict[str, dict[str, dict[str, float | None]]]:
    rows: dict[str, Any] = {}
    for stage in STAGES:
        metrics = {}
        for key, _, _ in METRICS:
            vals = [
                s["stages"][stage]["eval"][key]
                for s in seeds
                if key in s["stages"].get(stage, {}).get("eval", {})
            ]
            if vals:
                metrics[key] = {
                    "mean": statistics.mean(vals),
                    "std": statistics.stdev(vals) if len(vals) > 1 else None,
                    "n": len(vals),
                }
        if metrics:
            rows[stage] = metrics
    return rows


def findings(agg: dict) -> list[str]:
    """Sentences computed from the numbers: the KL change and the search / EM shifts per stage."""
    lines = []
    sft, dist, grpo_ = agg.get("sft", {}), agg.get("distill", {}), agg.get("grpo", {})
    if "teacher_kl" in sft and "teacher_kl" in dist:
        a, b = sft["teacher_kl"]["mean"], dist["teacher_kl"]["mean"]
        lines.append(
            f"Teacher KL per token on the held-out episodes: {a:.3f} after SFT, {b:.3f} after distillation "
            + (f"({100 * (b - a) / a:+.0f}%; " if a > 0 else "(")
            + "the blog saw -39% over 50 steps)."
        )
    for name, row in (("distillation", dist), ("GRPO", grpo_)):
        before = sft if name == "distillation" else dist
        parts = []
        for key, label, scale in METRICS[1:]:
            if key in row and key in before:
                parts.append(
                    f"{label} {before[key]['mean'] * scale:.{1 if scale == 100.0 else 2}f} -> "
                    f"{row[key]['mean'] * scale:.{1 if scale == 100.0 else 2}f}"
                )
        if parts:
            lines.append(f"Across {name}: " + "; ".join(parts) + ".")
    return lines


def render(seeds: list[dict], command: str, elapsed: float, loads: list[str]) -> str:
    agg = aggregate(seeds)
    bench = seeds[0]["bench"] if seeds else {}
    header = ["stage"] + [label for _, label, _ in METRICS]
    lines = [
        "# After SFT on the CPU demo: on-policy distillation, then GRPO [outcome, clp_em]",
        "",
        f"Command: `{command}`; {len(seeds)} seed(s), {elapsed / 60:.1f} min wall in this invocation "
        "(stages read back from a previous run cost nothing). Load average at the start and at each "
        "write: " + "; ".join(loads[:1] + loads[-1:]) + ".",
        "",
        f"Teacher: {seeds[0]['config']['model'] if seeds else '?'} SFT on every correct teacher run (demo_ablation variant (a), "
        f"{seeds[0]['config']['max_steps'] if seeds else '?'} steps); student: the demo's SFT executor "
        "(variant (c), full filter, same steps). Distillation: reverse KL (beta 1), "
        f"{bench.get('distill_steps')} steps x {bench.get('batch_size')} on-policy episodes, lr "
        f"{bench.get('distill_lr')}; GRPO from the distilled model: `[outcome, clp_em]` weighted [1.0, 0.5], "
        f"{bench.get('grpo_steps')} steps x {bench.get('batch_size')} sub-queries x "
        f"{bench.get('num_generations')} rollouts, lr {bench.get('grpo_lr')}; max "
        f"{bench.get('max_completion_length')} completion tokens per episode. Prompts: each seed's verified "
        "teacher sub-queries (train split).",
        "Evaluation: held-out sub-queries ("
        + "; ".join(
            f"seed {s['seed']}: " + ", ".join(f"{n} {t}" for t, n in s["eval_set"].items()) for s in seeds
        )
        + "), greedy, the demo's prompt and budget (2 searches). Teacher KL = KL(model || teacher) per "
        "executor-written token (full vocabulary) on the model's own greedy held-out episodes; the "
        "teacher's row is 0 by definition. EM and P(2 searches) in %; mean ± std over seeds.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for stage, label in STAGES.items():
        if stage not in agg:
            continue
        cells = [
            _cell(
                [
                    s["stages"][stage]["eval"][k]
                    for s in seeds
                    if k in s["stages"].get(stage, {}).get("eval", {})
                ],
                sc,
            )
            for k, _, sc in METRICS
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    missing = [label for stage, label in STAGES.items() if stage not in agg]
    if missing:
        lines += [
            "",
            "Not finished in the runs recorded here: " + "; ".join(missing) + " (the command resumes them).",
        ]
    lines += ["", *findings(agg), ""]
    lines += ["Training logs (per logged step):", ""]
    for s in seeds:
        for stage in ("distill", "grpo"):
            logs = s["stages"].get(stage, {}).get("train_logs")
            if logs:
                lines.append(
                    f"- seed {s['seed']} {stage}: "
                    + "; ".join(
                        ", ".join(
                            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in h.items()
                        )
                        for h in logs
                    )
                )
    lines += ["", "Wall time per stage (s; train = SFT or training, eval = held-out evaluation):", ""]
    lines += [
        "| seed | stage | " + " | ".join(("filter", "train", "eval", "teacher KL")) + " |",
        "|---|---|---|---|---|---|",
    ]
    for s in seeds:
        lines.append(
            f"| {s['seed']} | world + collection | - | {s['seconds']['world+collect']:.0f} | - | - |"
        )
        for stage, res in s["stages"].items():
            sec = res["seconds"]
            train = sec.get("train", sec.get("sft"))
            cells = [sec.get("filter"), train, sec.get("eval"), sec.get("teacher_kl")]
            lines.append(
                f"| {s['seed']} | {stage} | "
                + " | ".join("-" if c is None else f"{c:.0f}" for c in cells)
                + " |"
            )
    versions = {json.dumps(s["provenance"].get("versions"), sort_keys=True) for s in seeds}
    lines += [
        "",
        "Made with: "
        + "; ".join(", ".join(f"{k} {v}" for k, v in (json.loads(v) or {}).items()) for v in sorted(versions))
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", default=str(DEFAULT_CONFIG.relative_to(REPO)))
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--out", default="outputs/post-training", help="one sub-directory per seed")
    p.add_argument("--results", default=str(REPO / "bench" / "results" / "post_training.md"))
    p.add_argument("--per_type", type=int, default=16, help="held-out sub-queries of each type")
    p.add_argument(
        "--questions", type=int, default=300, help="world questions (0: the config's), as demo_ablation"
    )
    p.add_argument("--distill_steps", type=int, default=8)
    p.add_argument("--grpo_steps", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=2, help="prompts per step (distillation and GRPO)")
    p.add_argument("--num_generations", type=int, default=2, help="GRPO rollouts per prompt")
    p.add_argument("--distill_lr", type=float, default=5e-5)
    p.add_argument("--grpo_lr", type=float, default=1e-5)
    p.add_argument("--max_completion_length", type=int, default=512)
    p.add_argument(
        "--max_steps",
        type=int,
        default=None,
        help="SFT steps of the teacher and the student (over the config's)",
    )
    p.add_argument(
        "--student_questions",
        type=int,
        default=None,
        help="collection questions that also run the untrained SmolLM2 (over the config's; 0 = teacher only)",
    )
    p.add_argument(
        "--report_only",
        action="store_true",
        help="write the results from the stages already finished under --out; train and evaluate nothing",
    )
    p.add_argument(
        "--sequential_sft",
        action="store_true",
        help="train the teacher and the student one after the other (default: the teacher in a second process)",
    )
    a = p.parse_args(argv)
    command = "python bench/post_training_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    bench = {
        k: getattr(a, k)
        for k in (
            "per_type",
            "distill_steps",
            "grpo_steps",
            "batch_size",
            "num_generations",
            "distill_lr",
            "grpo_lr",
            "max_completion_length",
        )
    }
    results_md = Path(a.results)
    start = time.perf_counter()
    loads = [load_average()]
    finished: list[dict] = []

    def write(current: dict | None) -> str:
        loads.append(load_average())
        seeds = finished + ([current] if current is not None else [])
        text = render(seeds, command.strip(), time.perf_counter() - start, loads)
        results_md.parent.mkdir(parents=True, exist_ok=True)
        results_md.write_text(text, encoding="utf-8")
        results_md.with_suffix(".json").write_text(
            json.dumps(
                {
                    "command": command.strip(),
                    "load_average": loads,
                    "seeds": seeds,
                    "summary": aggregate(seeds),
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        return text

    for seed in a.seeds:
        overrides: dict[str, Any] = {
            "seed": seed,
            "out": str(Path(a.out) / f"seed{seed}"),
            "keep_checkpoint": True,
        }
        if a.questions:
            overrides["questions"] = a.questions
        if a.max_steps:
            overrides["max_steps"] = a.max_steps
        if a.student_questions is not None:
            overrides["student_questions"] = a.student_questions
        cfg = load_config(REPO / a.config if not Path(a.config).is_absolute() else a.config, overrides)
        log(f"seed {seed} -> {cfg.out}; load {load_average()}")
        finished.append(
            run_seed(cfg, bench, parallel_sft=not a.sequential_sft, report_only=a.report_only, on_step=write)
        )
    text = write(None)
    print(text, flush=True)
    log(f"done in {(time.perf_counter() - start) / 60:.1f} min; wrote {results_md} and its .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
