"""The teacher's turn-2 prompts on a prepared decoupled world, and a linear readout of a frozen model.

The prompt sets come from a `bench/demo_ablation_decoupled.py` seed folder: one per distinct person
sub-query of the train split (from the collected rollouts) and one per held-out person sub-query
(from the teacher's greedy evaluation), each with whether its first results miss the gold passage
and its subject entity. The readout is a logistic regression on the model's last-token hidden state
at the prompt: the position whose next token is the choice between searching again and answering.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

RESAMPLES = 2_000
"""Bootstrap resamples of the subject entities."""


def heldout_prompts(seed_dir: Path, world_file: dict) -> tuple[list, list[bool], list[str]]:
    """The teacher's held-out turn-2 prompts, whether each one's first results miss the gold
    passage, and its subject entity."""
    from bench.probing.probe import turn2_prompts

    by_id = {}
    for t in world_file["teacher"]:
        by_id.setdefault(t["id"], t)
    prompts = [p for p in turn2_prompts(seed_dir / "ref-teacher" / "eval.jsonl") if p.id in by_id]
    return prompts, [not by_id[p.id]["hit"] for p in prompts], [by_id[p.id]["subject"] for p in prompts]


def train_prompts(seed_dir: Path) -> tuple[list, list[bool], list[str]]:
    """One turn-2 prompt per distinct person sub-query of the train split (the teacher's first
    collected run of it), whether its first results miss the gold passage, and its subject."""
    from bench.probing.probe import Turn2Prompt
    from executor_sft.files import read_jsonl
    from executor_sft.synthetic.relations import PERSON_RELATIONS

    seen: set[str] = set()
    prompts, missed, subjects = [], [], []
    for ep in read_jsonl(seed_dir / "rollouts.jsonl"):
        steps = {s["question"]: s for s in ep["question"].get("decomposition") or []}
        for r in ep["runs"]:
            step = steps.get(r["sub_query"])
            if r["counterfactual_of"] or step is None or step["relation"] not in PERSON_RELATIONS:
                continue
            if r["sub_query"] in seen or len(r["calls"]) < 2 or not r["searches"]:
                continue
            seen.add(r["sub_query"])
            call = r["calls"][1]
            prompts.append(Turn2Prompt("person", call["messages"], call.get("tools"), r["sub_query"]))
            missed.append(step["gold_doc_id"] not in r["searches"][0]["doc_ids"])
            subjects.append(step["subject_id"])
    return prompts, missed, subjects


def prompt_states(model, tokenizer, prompts, progress: str = "prompts") -> tuple[Any, list[float]]:
    """Per prompt, from one forward pass: the last-token hidden state at the middle and the last layer
    ((n, 2, d)) and P(search again) as `bench.probing.probe.p_search_again` scores it.

    The prompts share their start (the system prompt and the tools, about half of each turn-2
    prompt's tokens): it runs once, and each prompt's own tokens run on a copy of its cache."""
    import copy
    import math
    import os

    import numpy as np
    import torch
    from tqdm import tqdm

    from bench.probing.probe import CHOICES, choice_logprobs
    from executor_sft.llm.transformers_backend import render_prompt

    if not prompts:
        return np.zeros((0, 2, model.config.hidden_size)), []
    texts = [render_prompt(tokenizer, p.messages, p.tools, enable_thinking=False) for p in prompts]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    shared = min(len(os.path.commonprefix(ids)), min(len(i) for i in ids) - 1)
    states, p_search = [], []
    with torch.inference_mode():
        head = model(input_ids=torch.tensor([ids[0][:shared]]), use_cache=True) if shared else None
        for text, own in tqdm(list(zip(texts, ids, strict=True)), desc=progress, leave=False):
            cache = copy.deepcopy(head.past_key_values) if head is not None else None
            out = model(
                input_ids=torch.tensor([own[shared:]]),
                past_key_values=cache,
                use_cache=True,
                output_hidden_states=True,
            )
            hs = out.hidden_states
            states.append(np.stack([hs[len(hs) // 2][0, -1].float().numpy(), hs[-1][0, -1].float().numpy()]))
            logps = choice_logprobs(model, tokenizer, text, len(own), out, CHOICES)
            p_search.append(1.0 / (1.0 + math.exp(logps[1] - logps[0])))
    return np.stack(states), p_search


def hidden_states(model, tokenizer, prompts) -> Any:
    """`prompt_states`' hidden states alone."""
    return prompt_states(model, tokenizer, prompts, progress="hidden states")[0]


def fit_logistic(x, y, l2: float = 1.0, steps: int = 2000):
    """Class-balanced, L2-regularised logistic regression on standardised features (numpy); returns
    its decision function (above 0: predicted True)."""
    import numpy as np

    mu, sd = x.mean(0), x.std(0) + 1e-6
    z = np.c_[(x - mu) / sd, np.ones(len(x))]
    y = np.asarray(y, dtype=float)
    pos, neg = max(1.0, y.sum()), max(1.0, len(y) - y.sum())
    weight = np.where(y == 1, len(y) / (2 * pos), len(y) / (2 * neg))
    w = np.zeros(z.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z @ w)))
        w -= 0.1 * (z.T @ (weight * (p - y)) / len(y) + l2 * np.r_[w[:-1], 0.0] / len(y))
    return lambda xs: np.c_[(xs - mu) / sd, np.ones(len(xs))] @ w


def balanced_accuracy(pred, truth) -> float:
    """The mean of the two classes' recalls; NaN unless both classes are in `truth`."""
    recalls = [
        statistics.fmean(p == t for p, t in zip(pred, truth, strict=True) if t == c)
        for c in (True, False)
        if c in truth
    ]
    return statistics.fmean(recalls) if len(recalls) == 2 else float("nan")


def by_entity_interval(stat, values: list, missed: list[bool], subjects: list[str], seed: int = 0) -> dict:
    """`stat(values, missed)` with a 95% interval from resampling subject entities."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(subjects):
        groups.setdefault(s, []).append(i)
    keys, rng, draws = sorted(groups), random.Random(seed), []
    for _ in range(RESAMPLES):
        idx = [i for k in rng.choices(keys, k=len(keys)) for i in groups[k]]
        value = stat([values[i] for i in idx], [missed[i] for i in idx])
        if value == value:  # not NaN
            draws.append(value)
    draws.sort()
    point = stat(values, missed)
    if not draws:
        return {"value": point, "low": None, "high": None, "entities": len(keys)}
    return {
        "value": point,
        "low": draws[int(0.025 * len(draws))],
        "high": draws[int(0.975 * len(draws)) - 1],
        "entities": len(keys),
    }


__all__ = [
    "balanced_accuracy",
    "by_entity_interval",
    "fit_logistic",
    "heldout_prompts",
    "hidden_states",
    "prompt_states",
    "train_prompts",
]
