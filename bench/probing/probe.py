"""The turn-2 decision probe: P(search again) at the scripted teacher's exact turn-2 prompt.

After its first search, an executor either opens a second `<tool_call>` or gives its
`<answer>`. At the teacher's turn-2 prompt of a held-out sub-query (the request after its first
search, tools included), the probe scores both continuations by their sequence log-probability
(the prompt's forward pass once, each continuation on its cache; no sampling) and reports
p_tool / (p_tool + p_answer). Greedy decoding searches again when it is above 0.5; its mean over plain and over ambiguous sub-queries shows
whether training moves the decision towards the right type even where greedy decoding never
crosses.

`bench/demo_second_search.py` reads it after training; `probe_callback.ProbeCallback` runs it
during training (the learning curve of issue #39).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor_sft.files import read_jsonl

PLAIN, AMBIGUOUS = "single_hop", "single_hop_ambiguous"
CHOICES = ("<tool_call>", "<answer>")
"""The two continuations compared: search again, or answer."""


@dataclass(frozen=True)
class Turn2Prompt:
    """One request the probe scores: the sub-query's type, the chat so far, the tools offered."""

    kind: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    id: str | None = None


def turn2_prompts(eval_jsonl: str | Path, kinds: Sequence[str] | None = None) -> list[Turn2Prompt]:
    """The scripted teacher's second call on each evaluated sub-query of `eval_jsonl` (the per-run
    JSONL of `evaluate_executor`), optionally only sub-queries of `kinds`, in file order."""
    out = []
    for row in read_jsonl(Path(eval_jsonl)):
        calls = row["run"]["calls"]
        kind = row["score"].get("type", "untyped")
        if len(calls) >= 2 and (kinds is None or kind in kinds):
            out.append(Turn2Prompt(kind, calls[1]["messages"], calls[1].get("tools"), row["score"].get("id")))
    return out


def continuation_logprobs(model, tokenizer, prefix: str, choices: Sequence[str]) -> list[float]:
    """log P(choice | `prefix`) of each choice: the summed log-probabilities of its tokens.

    The prefix (a ~1,000-token turn-2 prompt) runs once and its keys and values are kept; each
    choice (a few tokens) then runs on a copy of that cache, so the probe costs one prompt's
    forward pass instead of one per choice. A choice's tokens are those of `prefix + choice`
    after the prefix's own, as a model reading the whole text would see them.
    """
    import torch

    p_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    device = next(model.parameters()).device
    head = model(input_ids=torch.tensor([p_ids], device=device), use_cache=True, logits_to_keep=1)
    return choice_logprobs(model, tokenizer, prefix, len(p_ids), head, choices)


def choice_logprobs(
    model, tokenizer, prefix: str, n_prefix: int, head, choices: Sequence[str]
) -> list[float]:
    """log P(choice | `prefix`) of each choice, given `head`: the model's output on the prefix's
    `n_prefix` tokens (its last logits and its cache, which each choice runs on a copy of)."""
    import copy

    import torch

    device = next(model.parameters()).device
    first = head.logits[0, -1].float().log_softmax(-1)
    scores = []
    for choice in choices:
        c_ids = tokenizer(prefix + choice, add_special_tokens=False)["input_ids"][n_prefix:]
        total = first[c_ids[0]].item()
        if len(c_ids) > 1:
            rest = model(
                input_ids=torch.tensor([c_ids[:-1]], device=device),
                past_key_values=copy.deepcopy(head.past_key_values),
                use_cache=True,
            ).logits[0]
            logps = rest.float().log_softmax(-1)
            total += logps.gather(1, torch.tensor(c_ids[1:], device=device)[:, None]).sum().item()
        scores.append(total)
    return scores


def p_search_again(model, tokenizer, prompt: Turn2Prompt) -> float:
    """p(`<tool_call>`) / (p(`<tool_call>`) + p(`<answer>`)) at `prompt` (no gradient)."""
    import math

    import torch

    from executor_sft.llm.transformers_backend import render_prompt

    prefix = render_prompt(tokenizer, prompt.messages, prompt.tools, enable_thinking=False)
    with torch.inference_mode():
        tool, answer = continuation_logprobs(model, tokenizer, prefix, CHOICES)
    return 1.0 / (1.0 + math.exp(answer - tool))


def p_search_each(model, tokenizer, prompts: Sequence[Turn2Prompt], progress: bool = False) -> list[float]:
    """`p_search_again` of each prompt, in order."""
    from tqdm import tqdm

    return [
        p_search_again(model, tokenizer, p)
        for p in tqdm(prompts, desc="turn-2 prompts", leave=False, disable=not progress)
    ]


def mean_by_kind(prompts: Sequence[Turn2Prompt], probs: Sequence[float]) -> dict[str, float]:
    """The mean probability per sub-query type."""
    by_kind: dict[str, list[float]] = {}
    for prompt, p in zip(prompts, probs, strict=True):
        by_kind.setdefault(prompt.kind, []).append(p)
    return {k: statistics.mean(v) for k, v in by_kind.items()}


@dataclass(frozen=True)
class ProbeResult:
    """P(again | plain), P(again | ambiguous), their difference (ambiguous - plain) and its 95%
    interval from resampling prompts within each type; the per-prompt probabilities."""

    p_plain: float
    p_ambiguous: float
    diff: float
    ci95: tuple[float, float]
    plain: list[float]
    ambiguous: list[float]

    def to_dict(self, per_prompt: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "p_plain": self.p_plain,
            "p_ambiguous": self.p_ambiguous,
            "diff": self.diff,
            "ci95": list(self.ci95),
            "n": {"plain": len(self.plain), "ambiguous": len(self.ambiguous)},
        }
        if per_prompt:
            out["probs"] = {"plain": self.plain, "ambiguous": self.ambiguous}
        return out


def summarise(prompts: Sequence[Turn2Prompt], probs: Sequence[float], *, seed: int = 0) -> ProbeResult:
    """The probe's figures from per-prompt probabilities; both types must be present.

    The interval is `share_difference`'s seeded percentile bootstrap with one "run" per prompt,
    its value the probability (the mean of probabilities resamples as the share of 0/1 runs does).
    """
    from bench.probing.share_difference import share_difference

    plain = [p for q, p in zip(prompts, probs, strict=True) if q.kind == PLAIN]
    ambiguous = [p for q, p in zip(prompts, probs, strict=True) if q.kind == AMBIGUOUS]
    if not plain or not ambiguous:
        raise ValueError(
            f"the probe needs {PLAIN} and {AMBIGUOUS} prompts; got {len(plain)} and {len(ambiguous)}"
        )
    d = share_difference([[p] for p in ambiguous], [[p] for p in plain], seed=seed)
    return ProbeResult(
        p_plain=statistics.mean(plain),
        p_ambiguous=statistics.mean(ambiguous),
        diff=d.diff,
        ci95=d.ci95,
        plain=plain,
        ambiguous=ambiguous,
    )


def run_probe(model, tokenizer, prompts: Sequence[Turn2Prompt], *, seed: int = 0) -> ProbeResult:
    """The probe on `model` in eval mode (its train/eval mode is restored after)."""
    was_training = model.training
    model.eval()
    try:
        probs = p_search_each(model, tokenizer, prompts)
    finally:
        model.train(was_training)
    return summarise(prompts, probs, seed=seed)


__all__ = [
    "AMBIGUOUS",
    "CHOICES",
    "PLAIN",
    "ProbeResult",
    "Turn2Prompt",
    "continuation_logprobs",
    "mean_by_kind",
    "p_search_again",
    "p_search_each",
    "run_probe",
    "summarise",
    "turn2_prompts",
]
