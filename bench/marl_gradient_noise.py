"""How much signal one multi-agent GRPO step carries, per credit rule: the gradient's noise scale.

    nice -n 5 python bench/marl_gradient_noise.py --sft /work/marl_runs/sft-world \\
        --work /work/marl_runs/pool --screen_deep 6 --screen_wide 4 --heldout_deep 0 --heldout_wide 0 \\
        --generations 4 --questions_per_step 2 --max_tokens 64 --max_rounds 2 --max_parallel 2 \\
        --max_turns 2 --batches 6

bench/marl_credit.py's pool run moved no curve up. This asks why without training: from the SFT
checkpoint, each credit rule draws `--batches` independent batches on the same pool (the trainer's
own sampler and rollouts) and takes each batch's loss gradient g_i, with no step in between. With k
such gradients,

    signal  |G|^2   = (k |mean_i g_i|^2 - mean_i |g_i|^2) / (k - 1)     (unbiased)
    noise   tr(S)/B = k / (k - 1) * (mean_i |g_i|^2 - |mean_i g_i|^2)

where G is the expected gradient on the pool and S the covariance of one batch's gradient times its
B groups. Their ratio, noise over signal per batch, is how many batches one step would have to average
for its noise to fall to its signal (the "simple noise scale" of large-batch training, in batches).
A ratio near or below 1 means a step points uphill; a ratio of 50 means a step is mostly noise and a
run needs about 50 times the rollouts per step (or as many more steps at a rate that small) before
the reward can move. The mean pairwise cosine between batch gradients says the same without the
estimator: it is about 1 / (1 + ratio). Writes `--results`.{md,json}. Each batch's gradient is
kept under `--work`/noise/<arm>/ (fp32, the model's size), so a killed run resumes past finished
batches and arms.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.marl_credit import RESULTS, parser, script_args, train_questions, training_args  # noqa: E402


def batch_gradient(trainer: Any, batch: list[dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    """One batch's rollouts, scored, and the gradient of the trainer's loss on them (flattened, fp32)."""
    import torch

    inputs = trainer._generate_and_score_completions(batch)
    model = trainer.model
    model.zero_grad(set_to_none=True)
    trainer.accelerator.backward(trainer.compute_loss(model, inputs))
    params = [p for p in model.parameters() if p.requires_grad]
    grad = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).float().flatten() for p in params]
    )
    model.zero_grad(set_to_none=True)
    last = trainer.episode_log[-1]
    return grad, {"rewards": last["rewards"], "statuses": last["statuses"], "grad_norm": float(grad.norm())}


def gram(grads: list[Any], chunk: int = 1 << 22) -> Any:
    """The k x k matrix of dot products between the batch gradients, summed in float64 a slice at a
    time (k whole gradients in float64 would not fit beside the model on a small machine)."""
    import torch

    k = len(grads)
    out = torch.zeros(k, k, dtype=torch.float64)
    for start in range(0, grads[0].numel(), chunk):
        rows = torch.stack([g[start : start + chunk] for g in grads]).double()
        out += rows @ rows.T
    return out


def noise_scale(dots: Any) -> dict[str, float]:
    """The unbiased signal and noise estimates of the module docstring, from the Gram matrix of
    k >= 2 batch gradients."""
    k = dots.shape[0]
    norms = dots.diagonal()
    sq = float(norms.mean())
    mean_sq = float(dots.sum()) / k**2
    signal = (k * mean_sq - sq) / (k - 1)
    noise = k / (k - 1) * (sq - mean_sq)
    cosines = [
        float(dots[i, j] / (norms[i] * norms[j]).sqrt())
        for i in range(k)
        for j in range(i + 1, k)
        if norms[i] > 0 and norms[j] > 0
    ]
    return {
        "signal": signal,
        "noise_per_batch": noise,
        "noise_over_signal": noise / signal if signal > 0 else float("inf"),
        "mean_cosine": statistics.fmean(cosines) if cosines else float("nan"),
        "zero_gradients": int((norms == 0).sum()),
    }


def jackknife(dots: Any) -> dict[str, float]:
    """Leave-one-batch-out ratios: how far the estimate rests on any single batch."""
    k = dots.shape[0]
    ratios = []
    for i in range(k):
        keep = [j for j in range(k) if j != i]
        ratios.append(noise_scale(dots[keep][:, keep])["noise_over_signal"])
    return {"min": min(ratios), "max": max(ratios)}


def _endless(trainer: Any):
    """The trainer's batches, epoch after epoch (a pool of two questions is one batch an epoch)."""
    while True:
        yield from trainer.get_train_dataloader()


def run_arm(arm: str, world: Path, retriever, train_q, args) -> dict[str, Any]:
    import torch
    from tqdm import tqdm
    from trl import ModelConfig

    from executor_sft.files import write_text
    from executor_sft.grpo.marl_train import build_marl_trainer

    trainer = build_marl_trainer(
        script_args(world, arm, args),
        training_args(Path(args.work) / "noise" / f"out-{arm}", args),
        ModelConfig(model_name_or_path=args.sft, dtype="float32"),
        questions=train_q,
        retriever=retriever,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what `train()` sets before its first step
    loader = _endless(trainer)
    folder = Path(args.work) / "noise" / arm
    folder.mkdir(parents=True, exist_ok=True)
    for i in tqdm(range(args.batches), desc=f"{arm} batches", unit="batch"):
        done = folder / f"batch-{i}.json"
        if done.is_file():  # a killed run resumes past its finished batches
            next(loader)
            continue
        start = time.perf_counter()
        torch.manual_seed(args.seed * 1000 + i)  # each batch its own draw, the same after a resume
        grad, record = batch_gradient(trainer, next(loader))
        torch.save(grad, folder / f"batch-{i}.pt")
        write_text(done, json.dumps(record | {"seconds": time.perf_counter() - start}) + "\n")
    batches = [json.loads((folder / f"batch-{i}.json").read_text()) for i in range(args.batches)]
    dots = gram([torch.load(folder / f"batch-{i}.pt") for i in range(args.batches)])
    result = {"arm": arm, "batches": batches, "seconds": sum(b["seconds"] for b in batches)}
    return result | noise_scale(dots) | {"jackknife": jackknife(dots), "gram": dots.tolist()}


def markdown(results: dict[str, Any]) -> str:
    rollouts = results["settings"]["questions_per_step"] * results["settings"]["generations"]
    lines = [
        "# Multi-agent GRPO: how much signal one step carries (gradient noise scale at the SFT checkpoint)",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Load average at the end: {results['load_average']}. Pool: {results['pool']}. "
        f"One batch = {rollouts} rollouts (what one step of the pool run trained on).",
        "",
        "| arm | batches | zero gradients | mean batch reward | ‖G‖² (signal) | tr(S)/B (noise per batch) "
        "| noise / signal (batches per step for SNR 1) | leave-one-out range | mean pairwise cosine | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, r in results["arms"].items():
        reward = statistics.fmean(statistics.fmean(b["rewards"]) for b in r["batches"])
        lines.append(
            f"| {arm} | {len(r['batches'])} | {r['zero_gradients']} | {reward:.3f} | {r['signal']:.3e} "
            f"| {r['noise_per_batch']:.3e} | {r['noise_over_signal']:.1f} "
            f"| {r['jackknife']['min']:.1f} to {r['jackknife']['max']:.1f} | {r['mean_cosine']:.3f} "
            f"| {r['seconds']:.0f} |"
        )
    lines += ["", *results["verdict"], ""]
    return "\n".join(lines)


def verdict(results: dict[str, Any]) -> list[str]:
    rollouts = results["settings"]["questions_per_step"] * results["settings"]["generations"]
    out = []
    for arm, r in results["arms"].items():
        ratio = r["noise_over_signal"]
        if ratio == float("inf"):
            out.append(
                f"- {arm}: no signal measurable over {len(r['batches'])} batches (the estimate of |G|^2 "
                "is not positive): the batches' gradients disagree as much as independent noise would."
            )
        else:
            out.append(
                f"- {arm}: noise is {ratio:.1f} times the signal in one batch of {rollouts} rollouts; a "
                f"step needs about {max(1.0, ratio) * rollouts:.0f} rollouts for its noise to fall to its "
                "signal."
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--batches", type=int, default=6, help="Independent batches per arm (at least 3).")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(results=str(RESULTS / "marl_gradient_noise"), arms=["shared", "substitution"])
    args = p.parse_args(argv)
    if args.batches < 3:
        p.error("--batches: at least 3 (the leave-one-out range needs two left)")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    work = Path(args.work)
    world, retriever, train_q, _, pool_record = train_questions(work, args)
    (work / "noise").mkdir(parents=True, exist_ok=True)
    arms: dict[str, Any] = {}
    for arm in [a for a in args.arms if a != "none"]:
        path = work / "noise" / f"{arm}.json"
        if not path.is_file() or args.redo:
            path.write_text(json.dumps(run_arm(arm, world, retriever, train_q, args), indent=1) + "\n")
        arms[arm] = json.loads(path.read_text())
    results = {
        "command": "python bench/marl_gradient_noise.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k not in ("redo", "results", "arms", "work")},
        "load_average": os.getloadavg(),
        "pool": pool_record["pool"] if pool_record else None,
        "arms": arms,
    }
    results["verdict"] = verdict(results)
    out = Path(args.results)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results))
    print("\n".join(results["verdict"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
