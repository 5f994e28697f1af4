"""The whole method on one CPU in minutes: world -> index -> collect -> filter -> SFT -> evaluate.

`run_demo(DemoConfig(...))` is what `python recipes/demo.py` runs
(`recipes/configs/demo.yaml` holds the measured defaults; `bench/demo_bench.py` runs it per seed):

1. a fictional world (`write_world`) and a BM25 index of its corpus;
2. collection (`executor_sft.rollout.collect`): scripted backbone, answerer and judge, the
   scripted teacher as driver, and SmolLM2-135M-Instruct (`TransformersChatModel`) as the
   student on the first `student_questions` train questions (its runs mostly fail and the
   filter drops them; the rest are collected teacher-only to fit the CPU budget);
3. the project's filter (default rules) -> `sft.jsonl`;
4. passage-masked SFT of SmolLM2 (`executor_sft.sft.train.train_executor`, CPU, fp32);
5. executor-level evaluation (`executor_sft.eval.executor_eval`) of the untrained and the
   trained student on HELD-OUT sub-queries (`subqueries_test.jsonl`: no test sub-query occurs
   in any train question), through the same `run_executor`, prompt, budgets and chat template
   as collection. Writes `results.md` and `results.json` with the before/after table.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from executor_sft.configfile import load_config as load_yaml_config
from executor_sft.demos.sample_data import (
    ROLLOUTS,
    SFT,
    SFT_REPORT,
    SampleConfig,
    bm25_index,
    collect_into,
    filter_rollouts,
    pipeline_config,
    provenance,
)
from executor_sft.safe_interrupt import run_async
from executor_sft.schema import Role
from executor_sft.synthetic import TEACHER_EXTRA_SEARCH_RATE


class DemoConfig(BaseModel):
    """Every knob of the demo; `recipes/configs/demo.yaml` holds the measured defaults.

    Unknown keys are errors (`configfile.load_config`); `cfg.model_dump()` is the `config`
    recorded in `results.json`.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    seed: int = 0
    out: str = "outputs/demo"
    # world
    entities: int = 400
    questions: int = 240
    max_rounds: int = 5
    max_turns: int = 3
    top_k: int = 3
    # collection
    collect_questions: int | None = None
    """Train questions collected with the scripted teacher (None: all)."""
    student_questions: int = 1
    """Of those, how many also run the real student model (slow on CPU; 0 = none)."""
    student_max_tokens: int = 48
    teacher_extra_search_rate: float = TEACHER_EXTRA_SEARCH_RATE
    """Share of sub-queries where the scripted teacher searches again without need (ours, sized to Tab. 4)."""
    # SFT
    model: str = "offline:smollm2"
    max_steps: int = 16
    batch_size: int = 2
    grad_accum: int = 1
    learning_rate: float = 2e-4
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.1
    max_length: int = 1024
    gathered_loss: bool = True
    """The LM head only at trained positions (the SFT recipe's `gathered_loss`): TRL's loss, fewer FLOPs."""
    trainable_layers: int | None = None
    """Train only the top N decoder layers (the recipe's `trainable_layers`; None: all)."""
    bf16: bool | Literal["auto"] = "auto"
    """bf16 autocast over fp32 master weights (the checkpoint stays fp32). auto: on where the CPU
    multiplies bf16 in hardware (`sft.models.cpu_has_native_bf16`), off where it would be slower."""
    compile_layers: bool = True
    """torch.compile each decoder layer (the recipe's `compile_layers`): 12-20 s once, then ~11% less per step
    on the demo's rows (bench/results/cpu_fast_path.md)."""
    optim: str = "adamw_torch_fused"
    """The optimizer (TRL's `optim`): fused AdamW, the same update as `adamw_torch` in one kernel."""
    # evaluation
    eval_subqueries: int = 24
    eval_max_tokens: int = 64
    eval_concurrency: int = 24
    """Runs evaluated at once; the transformers backend batches their calls."""
    eval_prefix_cache_tokens: int = Field(65536, ge=0)
    """The student's prefix-reuse cap: every run in flight keeps its turns (24 x ~1,500 tokens
    here); 3 GB of fp32 SmolLM2 keys and values. 0 turns reuse off."""
    eval_samples: int = Field(1, ge=1)
    """Runs per held-out sub-query (the paper's mean@4 is 4); shares and EM are per run."""
    eval_temperature: float = Field(0.0, ge=0.0)
    """0: greedy; > 0 samples (the paper configs' executor temperature is 0.6)."""
    reference_teacher: bool = True
    """Also evaluate the scripted teacher on the held-out sub-queries (a reference row; no model)."""
    keep_checkpoint: bool = True

    def uses_bf16(self) -> bool:
        """`bf16` with auto resolved on this machine."""
        from executor_sft.sft.models import cpu_has_native_bf16

        return cpu_has_native_bf16() if self.bf16 == "auto" else bool(self.bf16)


@dataclass
class DemoResult:
    config: dict[str, Any]
    before: dict[str, Any]
    after: dict[str, Any]
    teacher: dict[str, Any] | None
    sft_rows: dict[str, int]
    train_metrics: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    markdown: str = ""


def load_config(path: str | Path | None, overrides: dict[str, Any]) -> DemoConfig:
    """The YAML at `path` (None: the defaults) with the non-None `overrides` on top.

    Errors are `configfile.load_config`'s one line naming the file and the field.
    """
    if path is not None:
        return load_yaml_config(DemoConfig, path, overrides)
    return DemoConfig.model_validate({k: v for k, v in overrides.items() if v is not None})


def _student_model(cfg: DemoConfig, path: str | None = None):
    from executor_sft.llm import TransformersChatModel

    # Concurrent unseeded calls are generated as one batch, up to the evaluation's concurrency.
    return TransformersChatModel(
        path or cfg.model,
        name=path or cfg.model,
        max_batch_size=max(1, cfg.eval_concurrency),
        prefix_cache_tokens=cfg.eval_prefix_cache_tokens,
    )


def collect_demo(
    cfg: DemoConfig,
    out: Path,
    world,
    retriever,
    index_dir: Path,
    show_progress: bool = True,
    *,
    teacher_double_check: bool = False,
) -> int:
    """Teacher (+ real student on the first `student_questions`) episodes into out/rollouts.jsonl
    (`teacher_double_check`: `ScriptedTeacherExecutor.double_check`, the decoupled world's teacher)."""
    from executor_sft.agents import RoleConfig
    from executor_sft.data import load_questions
    from executor_sft.llm import SamplingParams
    from executor_sft.synthetic import scripted_models

    sample = SampleConfig(seed=cfg.seed, max_rounds=cfg.max_rounds, max_turns=cfg.max_turns, top_k=cfg.top_k)
    rollouts = out / ROLLOUTS
    rollouts.unlink(missing_ok=True)
    questions_path = out / "world" / "questions_train.jsonl"
    questions = load_questions(questions_path)[: cfg.collect_questions]
    scripted = scripted_models(
        world,
        seed=cfg.seed,
        teacher_extra_search_rate=cfg.teacher_extra_search_rate,
        teacher_double_check=teacher_double_check,
    )
    scripted.pop("student")
    n = 0
    k = min(cfg.student_questions, len(questions))
    if k:
        student = _student_model(cfg)
        pipeline = pipeline_config(sample, ["teacher", "student"])
        pipeline.roles["student"] = RoleConfig(sampling=SamplingParams(max_tokens=cfg.student_max_tokens))
        n += collect_into(
            rollouts,
            questions_path,
            questions[:k],
            {**scripted, "student": student},
            retriever,
            index_dir,
            pipeline,
            show_progress=show_progress,
        )
        student.close()
    n += collect_into(
        rollouts,
        questions_path,
        questions[k:],
        scripted,
        retriever,
        index_dir,
        pipeline_config(sample, ["teacher"]),
        show_progress=show_progress,
        accept_system_change=True,  # the first questions' episodes have a student role, these none
    )
    return n


def train_demo(cfg: DemoConfig, sft_path: Path, output_dir: Path, *, convergence=None, callbacks=None):
    """SFT of the demo student on `sft_path` into `output_dir`: `cfg.max_steps` steps, no
    checkpoints; or, with a `convergence.ConvergenceConfig`, its epochs, checkpoints every probe
    interval and resume from the last one. `callbacks` go to the Trainer."""
    from trl import ModelConfig, SFTConfig

    from executor_sft.sft.train import SFTScriptArguments, train_executor

    script_args = SFTScriptArguments(
        dataset_name=str(sft_path),
        **{
            "auto_resume": False,
            "gathered_loss": cfg.gathered_loss,
            "trainable_layers": cfg.trainable_layers,
            "compile_layers": cfg.compile_layers,
            **(convergence.script_overrides() if convergence is not None else {}),
        },
    )
    same_names = {
        f: getattr(cfg, f) for f in ("max_steps", "learning_rate", "lr_scheduler_type", "max_length")
    }
    training_args = SFTConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        warmup_steps=cfg.warmup_ratio,
        **same_names,
        # Memory is not the constraint on CPU; recomputing activations would cost ~1/3 more time.
        gradient_checkpointing=False,
        # Plain shuffling: length grouping sorted each mega-batch longest-first, so with 16 steps
        # whether the student learnt to search twice depended on the seed.
        train_sampling_strategy="random",
        bf16=cfg.uses_bf16(),
        use_cpu=True,
        optim=cfg.optim,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,
    )
    if convergence is not None:
        training_args = dataclasses.replace(training_args, **convergence.training_overrides())
    model_args = ModelConfig(model_name_or_path=cfg.model, dtype="float32")
    return train_executor(script_args, training_args, model_args, callbacks=callbacks)


def eval_settings(cfg: DemoConfig):
    """The student's collection settings (prompt, budget, protocol), with the evaluation's sampling."""
    from executor_sft.llm import SamplingParams

    sample = SampleConfig(seed=cfg.seed, max_rounds=cfg.max_rounds, max_turns=cfg.max_turns, top_k=cfg.top_k)
    settings = pipeline_config(sample, [Role.TEACHER, Role.STUDENT]).executor_settings(Role.STUDENT)
    sampling = SamplingParams(max_tokens=cfg.eval_max_tokens, temperature=cfg.eval_temperature)
    return settings.replace(sampling=sampling)


def evaluate(
    cfg: DemoConfig, model, retriever, sub_queries, name: str, runs_path: Path, show_progress: bool = True
):
    from executor_sft.eval.executor_eval import evaluate_executor

    settings = eval_settings(cfg)
    if cfg.eval_temperature > 0:
        import torch

        torch.manual_seed(cfg.seed)
    return run_async(
        evaluate_executor(
            model,
            retriever,
            [q for q in sub_queries for _ in range(cfg.eval_samples)],
            settings,
            name=name,
            concurrency=cfg.eval_concurrency,
            runs_path=runs_path,
            show_progress=show_progress,
        )
    )


def eval_mode(cfg: DemoConfig | dict[str, Any]) -> str:
    """How the held-out runs are decoded: `greedy` or `mean@N, T=t`."""
    c = cfg if isinstance(cfg, dict) else cfg.model_dump()
    if c["eval_temperature"] <= 0:
        return "greedy" if c["eval_samples"] == 1 else f"greedy x{c['eval_samples']}"
    return f"mean@{c['eval_samples']}, T={c['eval_temperature']:g}"


def render(result: DemoResult, before, after, teacher) -> str:
    from executor_sft.eval.executor_eval import markdown_table

    cfg = result.config
    rows = [before, after] + ([teacher] if teacher is not None else [])
    labels = ["student before SFT", "student after SFT"] + (
        ["scripted teacher (reference)"] if teacher else []
    )
    times = ", ".join(f"{k} {v:.0f}s" for k, v in result.seconds.items())
    return (
        f"Demo, seed {cfg['seed']}: {cfg['model']} on {before.n} held-out sub-queries "
        f"({eval_mode(cfg)}, max {cfg['eval_max_tokens']} new tokens per turn); SFT on "
        f"{sum(result.sft_rows.values())} rows {result.sft_rows}, {cfg['max_steps']} steps x "
        f"{cfg['batch_size'] * cfg['grad_accum']} rows, lr {cfg['learning_rate']}.\n\n"
        + markdown_table(rows, labels)
        + f"\n\nTimings: {times}.\n"
    )


def run_demo(cfg: DemoConfig, *, show_progress: bool = True) -> DemoResult:
    from executor_sft.eval.executor_eval import load_subqueries
    from executor_sft.synthetic import ScriptedTeacherExecutor, write_world

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    start = t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        times[name] = now - t
        t = now
        print(f"[demo] {name} done in {times[name]:.1f}s", file=sys.stderr, flush=True)

    world_dir = out / "world"
    if world_dir.exists():
        shutil.rmtree(world_dir)
    world = write_world(world_dir, cfg.seed, cfg.entities, cfg.questions)
    retriever, index_dir = bm25_index(world_dir / "corpus.jsonl", out / "index")
    lap("world+index")

    episodes = collect_demo(cfg, out, world, retriever, index_dir, show_progress)
    lap("collect")

    report = filter_rollouts(out / ROLLOUTS, out / SFT, out / SFT_REPORT)
    sft_rows = {k: v["records"] for k, v in report["strata"].items()}
    print(f"[demo] {episodes} episodes -> {report['totals']['rows']} SFT rows {sft_rows}", file=sys.stderr)
    lap("filter")

    sub_queries = load_subqueries(world_dir / "subqueries_test.jsonl", cfg.eval_subqueries)
    before_model = _student_model(cfg)
    before = evaluate(
        cfg,
        before_model,
        retriever,
        sub_queries,
        f"{cfg.model} (untrained)",
        out / "eval_before.jsonl",
        show_progress,
    )
    before_model.close()
    lap("eval_before")

    ckpt = out / "student-sft"
    if ckpt.exists():
        shutil.rmtree(ckpt)
    train = train_demo(cfg, out / SFT, ckpt)
    lap("sft")

    after_model = _student_model(cfg, str(ckpt))
    after = evaluate(
        cfg,
        after_model,
        retriever,
        sub_queries,
        f"{cfg.model} (SFT)",
        out / "eval_after.jsonl",
        show_progress,
    )
    after_model.close()
    lap("eval_after")

    teacher = None
    if cfg.reference_teacher:
        teacher = evaluate(
            cfg,
            ScriptedTeacherExecutor(world),
            retriever,
            sub_queries,
            "scripted teacher",
            out / "eval_teacher.jsonl",
            show_progress,
        )
    if not cfg.keep_checkpoint:
        shutil.rmtree(ckpt, ignore_errors=True)
    times["total"] = time.perf_counter() - start

    result = DemoResult(
        config=cfg.model_dump(),
        before=before.to_dict(),
        after=after.to_dict(),
        teacher=teacher.to_dict() if teacher else None,
        sft_rows=sft_rows,
        train_metrics={k: v for k, v in train.metrics.items() if isinstance(v, int | float)},
        seconds=times,
        provenance=provenance(cfg, index_dir),
    )
    result.markdown = render(result, before, after, teacher)
    (out / "results.md").write_text(result.markdown, encoding="utf-8")
    (out / "results.json").write_text(json.dumps(asdict(result), indent=2) + "\n", encoding="utf-8")
    return result
