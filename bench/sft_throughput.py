"""SFT throughput on executor-length rows: TRL-default batching vs packing vs our varlen path.

    python bench/sft_throughput.py --tiny                 # CPU smoke run (tiny shape)
    python bench/sft_throughput.py --out $OUT/sft.json    # GPU: Qwen3-1.7B shape, random weights

Every configuration trains the same random-weight model (fp32 master weights, bf16
autocast, fused AdamW) on the same synthetic rows (token ids random, lengths lognormal with
mean ~2k, clipped to [256, 6144]; ~30% of tokens trained, as in executor rows where
passages are masked). Reported: real (non-pad) tokens/s, MFU = 6 * N * tokens/s / peak
(N = all parameters, embedding counted once since it is tied; attention FLOPs not counted),
peak memory, ratio to the TRL-default baseline, and packed-vs-alone loss isolation.

Configurations:
- trl_default: batches of 8 rows padded to the longest, SDPA, gradient checkpointing,
  full-vocabulary logits (what SFTTrainer does with its defaults).
- packed_sdpa / packed_flex: best-fit-decreasing packing into 16k-token rows, per-sequence
  position_ids (TRL packing="bfd"), SDPA (block mask) or flex attention, checkpointing.
- varlen: packed rows with `executor_varlen` attention (flash varlen kernel), checkpointing.
- varlen_fast: varlen without checkpointing, logits only where a label is trained.
- varlen_fast_compile: varlen_fast with each decoder layer torch.compile'd.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from executor_sft.sft.varlen import register_varlen_attention  # noqa: E402

PEAK_FLOPS = {"cuda": 989e12, "cpu": 1e12}  # H100/H200 dense bf16 datasheet; CPU figure is nominal

CONFIGS = ["trl_default", "packed_sdpa", "packed_flex", "varlen", "varlen_fast", "varlen_fast_compile"]


@dataclass
class Shape:
    hidden: int = 2048
    layers: int = 28
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 6144
    vocab: int = 151936
    mean_len: int = 2000
    max_len: int = 6144
    min_len: int = 256
    pack_len: int = 16384
    batch: int = 8


TINY = Shape(64, 2, 4, 2, 16, 128, 512, 200, 600, 32, 1536, 8)


@dataclass
class Result:
    config: str
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    peak_mem_gib: float = 0.0
    step_s: float = 0.0
    real_tokens_per_step: float = 0.0
    padded_tokens_per_step: float = 0.0
    ratio_vs_baseline: float = 0.0
    error: str | None = None


def build_model(shape: Shape, attn: str, device: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        use_cache=False,
    )
    config._attn_implementation = attn
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    return model


def synthetic_rows(shape: Shape, n_tokens: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) rows; labels trained on ~30% of tokens in a few spans, like executor rows."""
    rng = random.Random(seed)
    sigma = 0.6
    mu = math.log(shape.mean_len) - sigma**2 / 2
    rows, total = [], 0
    while total < n_tokens:
        n = int(min(shape.max_len, max(shape.min_len, rng.lognormvariate(mu, sigma))))
        ids = [rng.randrange(16, shape.vocab) for _ in range(n)]
        labels = [-100] * n
        for _ in range(3):  # three assistant turns, ~10% of the row each
            start = rng.randrange(0, max(1, n - n // 10))
            for i in range(start, min(n, start + n // 10)):
                labels[i] = ids[i]
        rows.append((ids, labels))
        total += n
    return rows


def bfd_pack(rows, capacity: int) -> list[list[int]]:
    """Best-fit decreasing: row indices per bin (TRL's packing_strategy='bfd' does the same)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
    bins: list[tuple[int, list[int]]] = []
    for i in order:
        n = len(rows[i][0])
        best = min((b for b in bins if b[0] >= n), key=lambda b: b[0], default=None)
        if best is None:
            bins.append([capacity - n, [i]])
        else:
            best[0] -= n
            best[1].append(i)
    return [b[1] for b in bins]


def padded_batches(rows, batch: int, pad_id: int = 0):
    out = []
    for s in range(0, len(rows) - batch + 1, batch):
        chunk = rows[s : s + batch]
        width = max(len(r[0]) for r in chunk)
        ids = torch.full((batch, width), pad_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for j, (i, lab) in enumerate(chunk):
            ids[j, : len(i)], labels[j, : len(i)], mask[j, : len(i)] = torch.tensor(i), torch.tensor(lab), 1
        out.append({"input_ids": ids, "labels": labels, "attention_mask": mask, "real": int(mask.sum())})
    return out


def packed_row(rows, members: list[int]) -> dict:
    """One padding-free row: concatenated ids, per-sequence position_ids and cu_seqlens."""
    ids, labels, pos = [], [], []
    for i in members:
        ids += rows[i][0]
        labels += [-100] + rows[i][1][1:]  # no loss across a boundary
        pos += list(range(len(rows[i][0])))
    cu = torch.tensor(
        [0, *torch.tensor([len(rows[i][0]) for i in members]).cumsum(0).tolist()], dtype=torch.int32
    )
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "position_ids": torch.tensor([pos]),
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": int(cu.diff().max()),
        "max_length_k": int(cu.diff().max()),
        "real": len(ids),
    }


def packed_batches(rows, capacity: int):
    return [packed_row(rows, members) for members in bfd_pack(rows, capacity)]


def kept_logits_loss(model, batch):
    """Loss from logits at trained positions only (hidden states gathered before lm_head)."""
    labels = batch["labels"]
    targets = labels[:, 1:]
    keep = (targets != -100).nonzero(as_tuple=True)[1]
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "real")}
    out = model.model(**inputs)
    hidden = out.last_hidden_state[0, keep]
    logits = model.lm_head(hidden).float()
    return F.cross_entropy(logits, targets[0, keep])


def step_fn(config: str, model, batch):
    inputs = {k: v for k, v in batch.items() if k != "real"}
    if config.startswith("varlen_fast"):
        return kept_logits_loss(model, batch)
    return model(**inputs).loss


def to_device(batch, device):
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


def run_config(config, shape, rows, device, steps, warmup, baseline_tps) -> Result:
    result = Result(config)
    model = opt = None
    try:
        attn = {"trl_default": "sdpa", "packed_sdpa": "sdpa", "packed_flex": "flex_attention"}.get(config)
        if attn is None:
            attn = register_varlen_attention()
        model = build_model(shape, attn, device)
        model.train()
        if config in ("trl_default", "packed_sdpa", "packed_flex", "varlen"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.endswith("_compile"):
            for layer in model.model.layers:
                layer.compile(dynamic=True)
        n_params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
        batches = (
            padded_batches(rows, shape.batch)
            if config == "trl_default"
            else packed_batches(rows, shape.pack_len)
        )
        need = warmup + steps
        batches = (batches * math.ceil(need / len(batches)))[:need]
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        real = padded = 0
        for i, batch in enumerate(batches):
            if i == warmup:
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            b = to_device(batch, device)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = step_fn(config, model, b)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i >= warmup:
                real += batch["real"]
                padded += batch["input_ids"].numel()
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        result.tokens_per_s = real / elapsed
        result.mfu = 6 * n_params * result.tokens_per_s / PEAK_FLOPS[device]
        result.step_s = elapsed / steps
        result.real_tokens_per_step = real / steps
        result.padded_tokens_per_step = padded / steps
        if device == "cuda":
            result.peak_mem_gib = torch.cuda.max_memory_allocated() / 2**30
        if baseline_tps:
            result.ratio_vs_baseline = result.tokens_per_s / baseline_tps
    except Exception as e:  # one failing configuration must not lose the others' figures
        result.error = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        del model, opt
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return result


def isolation_check(shape, device, attn_names=("sdpa", "executor_varlen")) -> dict[str, float]:
    """Max |packed - alone| per-sequence loss, bf16 autocast, eval mode, no cache."""
    rows = synthetic_rows(shape, 4 * shape.mean_len, seed=1)[:4]
    batch = to_device(packed_row(rows, list(range(len(rows)))), device)
    out, alone_by_attn, packed_by_attn = {}, {}, {}
    for attn in attn_names:
        if attn == "executor_varlen":
            register_varlen_attention()
        model = build_model(shape, attn, device).eval()
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            inputs = {k: v for k, v in batch.items() if k not in ("labels", "real")}
            logits = model(**inputs).logits.float()
            losses = F.cross_entropy(
                logits[0, :-1], batch["labels"][0, 1:], reduction="none", ignore_index=-100
            )
            diffs, off, alones, packs = [], 0, [], []
            for ids, labels in rows:
                n = len(ids)
                lab = torch.tensor(labels, device=device)
                alone_logits = model(input_ids=torch.tensor([ids], device=device)).logits.float()[0, :-1]
                alone = F.cross_entropy(alone_logits, lab[1:], reduction="none", ignore_index=-100)
                mask = lab[1:] != -100
                alones.append(alone[mask].mean().item())
                packs.append(losses[off : off + n - 1][mask].mean().item())
                diffs.append(abs(packs[-1] - alones[-1]))
                off += n
        out[attn] = max(diffs)
        alone_by_attn[attn], packed_by_attn[attn] = alones, packs
        del model
        gc.collect()
    if "sdpa" in alone_by_attn and "executor_varlen" in packed_by_attn:  # the fast kernel vs SDPA, each alone
        out["varlen_packed_vs_sdpa_alone"] = max(
            abs(a - b) for a, b in zip(packed_by_attn["executor_varlen"], alone_by_attn["sdpa"], strict=True)
        )
    out["loss_scale"] = sum(alone_by_attn.get("sdpa", [0.0])) / max(1, len(alone_by_attn.get("sdpa", [])))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tiny", action="store_true", help="tiny shape, for CPU debugging")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=None, help="synthetic data size in tokens")
    ap.add_argument("--out", default=None, help="write results JSON here")
    args = ap.parse_args(argv)
    shape = TINY if args.tiny else Shape()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    n_tokens = args.tokens or (shape.pack_len * (args.steps + args.warmup + 2))
    rows = synthetic_rows(shape, n_tokens)
    lengths = [len(r[0]) for r in rows]
    env = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "shape": asdict(shape),
        "rows": len(rows),
        "mean_len": sum(lengths) / len(lengths),
        "max_len": max(lengths),
        "params_note": "MFU uses 6*N*tokens/s with N = all parameters (tied embedding counted once)",
    }
    print(json.dumps(env), flush=True)
    t_start = time.perf_counter()
    try:  # first, so a timeout later cannot lose it
        iso = isolation_check(shape, device)
    except Exception as e:
        iso = {"error": f"{type(e).__name__}: {e}"[:300]}
    print(json.dumps({"isolation_max_abs_loss_diff": iso}), flush=True)
    results, baseline = [], None
    for config in args.configs.split(","):
        t0 = time.perf_counter()
        r = run_config(config, shape, rows, device, args.steps, args.warmup, baseline)
        if config == "trl_default" and r.error and "OutOfMemory" in r.error:
            results.append(r)
            print(json.dumps(asdict(r)), flush=True)
            shape4 = Shape(**{**asdict(shape), "batch": 4})
            r = run_config(config, shape4, rows, device, args.steps, args.warmup, None)
            r.config = "trl_default_b4"
        if config == "trl_default" and not r.error:
            baseline = r.tokens_per_s
        results.append(r)
        print(json.dumps(asdict(r) | {"wall_s": round(time.perf_counter() - t0, 1)}), flush=True)
    print(f"total {time.perf_counter() - t_start:.0f}s", flush=True)
    print(f"\n{'config':<22}{'tok/s':>10}{'MFU':>8}{'peak GiB':>10}{'x base':>8}")
    for r in results:
        if r.error:
            print(f"{r.config:<22} ERROR {r.error}")
        else:
            print(
                f"{r.config:<22}{r.tokens_per_s:>10.0f}{r.mfu:>8.1%}{r.peak_mem_gib:>10.1f}{r.ratio_vs_baseline:>8.2f}"
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"env": env, "results": [asdict(r) for r in results], "isolation": iso}, indent=2)
        )


if __name__ == "__main__":
    main()
