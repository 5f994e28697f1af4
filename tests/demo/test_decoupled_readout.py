"""bench/decoupled_readout.py: pairs that differ only in the first results, pair accuracy, the two
readouts, and the documented commands end to end on a small prepared world."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from script_modules import REPO, load_script

from tests.support.recipes import stderr_tail

USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
"""A user's shell: the scripts must find `bench.probing` themselves."""


def _readout():
    return load_script("bench/decoupled_readout.py")


def test_pair_wins_orient_each_pair_by_its_miss_member_and_count_ties_half():
    ro = _readout()
    # pair 1: collected misses and scores higher (win); pair 2: collected holds gold and scores
    # higher (loss); pair 3: a tie
    assert ro.pair_wins([0.9, 0.9, 0.4], [0.1, 0.1, 0.4], [True, False, True]) == [1.0, 0.0, 0.5]
    acc = ro.pair_accuracy([1.0, 1.0, 0.0, 0.0], ["a", "a", "b", "b"])
    assert acc["value"] == 0.5 and acc["low"] == 0.0 and acc["high"] == 1.0 and acc["entities"] == 2


def _pairs_data(rng, n: int, cue: float, signal: float):
    """Features of n pairs: a sub-query cue (the same in both members) that tracks the collected
    label, a passage feature that flips with the edit, and noise the edit leaves alone."""
    missed = rng.random(n) < 0.4
    subjects = [f"e{i // 2}" for i in range(n)]
    base = rng.normal(size=(n, 8))
    base[:, 0] = cue * np.where(missed, 1.0, -1.0) + rng.normal(size=n)
    collected, edited = base.copy(), base.copy()
    collected[:, 1] = signal * np.where(missed, 1.0, -1.0) + rng.normal(size=n)
    edited[:, 1] = signal * np.where(missed, -1.0, 1.0) + rng.normal(size=n)
    return collected, edited, list(missed), subjects


def test_the_pairs_readout_finds_what_the_edit_changes_and_not_the_cue():
    ro = _readout()
    rng = np.random.default_rng(0)
    tc, te, tm, ts = _pairs_data(rng, 120, cue=3.0, signal=2.0)
    hc, he, hm, hs = _pairs_data(rng, 60, cue=3.0, signal=2.0)
    held = {"missed": hm, "subjects": hs}
    fit = ro.readout(np.r_[tc, te], [*tm, *(not m for m in tm)], [*ts, *ts], (hc, he), held)
    assert fit["pair_accuracy"]["value"] > 0.85 and fit["l2"] in ro.L2_GRID
    # features the edit leaves alone (the cue, noise): every pair ties, exactly chance
    cue_only = ro.readout(tc[:, [0, 2]], tm, ts, (hc[:, [0, 2]], he[:, [0, 2]]), held)
    assert cue_only["pair_accuracy"]["value"] == 0.5
    assert cue_only["balanced_accuracy"] == pytest.approx(0.5)
    half = ro.half_pairs((tc, te), {"missed": tm, "subjects": ts}, (hc, he), held, draws=3)
    assert half["prompts"] == 120 and half["draws"] == 3 and 0.8 < half["min"] <= half["mean"] <= half["max"]


def test_choose_l2_prefers_strong_regularisation_on_noise_and_weak_on_signal():
    ro = _readout()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 40))
    y = list(x[:, 0] > 0)
    subjects = [f"e{i}" for i in range(200)]
    assert ro.choose_l2(x, y, subjects) in ro.L2_GRID
    score = ro.fit_logistic(x, y, l2=ro.choose_l2(x, y, subjects))
    assert ro.balanced_accuracy(list(score(x) > 0), y) > 0.9


def test_pairs_edit_each_prompt_once_and_keep_its_label(tmp_path):
    from bench.probing.probe import Turn2Prompt
    from executor_sft.synthetic import DECOUPLED_WORLD, generate_world

    ro = _readout()
    world = generate_world(0, 200, 60, **DECOUPLED_WORLD)
    people = [e for e in world.entities if e.type == "person"]
    gold = next(
        e
        for e in people
        if e.kind == "core"
        and sum(n.kind == "namesake" and (n.name == e.name or n.extra.get("twin_of") == e.id) for n in people)
        >= 2
    )
    others = [
        n
        for n in people
        if n.kind == "namesake" and (n.name == gold.name or n.extra.get("twin_of") == gold.id)
    ]

    def prompt(shown):
        docs = "\n".join(
            f"Doc {i + 1} (Title: {e.name}) {world.passage_text(e)}" for i, e in enumerate(shown)
        )
        return Turn2Prompt(
            "person", [{"role": "user", "content": "Q?"}, {"role": "tool", "content": docs}], None, "q"
        )

    miss, hit = prompt(others[:1]), prompt([gold])
    out = ro.pairs(world, [miss, hit], [True, False], ["s", "s"], [gold.id, gold.id])
    assert out["missed"] == [True, False] and out["collected"] == [miss, hit]
    assert world.passage_text(gold) in out["edited"][0].messages[1]["content"]
    assert world.passage_text(gold) not in out["edited"][1].messages[1]["content"]
    with pytest.raises(AssertionError, match="side disagrees"):
        ro.pairs(world, [miss], [False], ["s"], [gold.id])  # a label that contradicts the passages


def test_a_seed_not_prepared_is_one_line_naming_the_command(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "bench/decoupled_readout.py",
            "--out",
            str(tmp_path),
            "--seeds",
            "0",
            "--done_dir",
            str(tmp_path),
        ],
        cwd=REPO,
        env=USER_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, stderr_tail(done.stderr)
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("error: ")
    assert "--prepare_only" in done.stderr


@pytest.mark.slow
def test_the_documented_commands_on_a_small_world(tmp_path):
    """`--prepare_only`, then the readout with a tiny offline model, as subprocesses."""
    out, done, results = tmp_path / "runs", tmp_path / "done", tmp_path / "readout"
    world = ["--entities", "200", "--questions", "60", "--seeds", "0", "--done_dir", str(done)]
    prep = subprocess.run(
        [sys.executable, "bench/demo_ablation_decoupled.py", "--prepare_only", "--out", str(out), *world],
        cwd=REPO,
        env=USER_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert prep.returncode == 0, stderr_tail(prep.stderr)
    assert (done / "seed0-world.json").is_file() and not (tmp_path / "runs" / "seed0" / "variant-c").exists()
    run = subprocess.run(
        [
            sys.executable,
            "bench/decoupled_readout.py",
            "--out",
            str(out),
            "--seeds",
            "0",
            "--done_dir",
            str(done),
            "--base",
            "offline:tiny-qwen3",
            "--results",
            str(results),
        ],  # fmt: skip
        cwd=REPO,
        env=USER_ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, stderr_tail(run.stderr)
    data = json.loads(results.with_suffix(".json").read_text())
    seed = data["seeds"]["0"]
    assert seed["train_pairs"] > 10 and seed["held_pairs"] > 3
    fig = seed["models"]["base (untrained)"]
    for layer in ("middle", "last"):
        for fit in ("fit_on_pairs", "fit_as_collected"):
            assert 0.0 <= fig[layer][fit]["pair_accuracy"]["value"] <= 1.0
        assert fig[layer]["fit_on_half_pairs"]["prompts"] == 2 * (seed["train_pairs"] // 2)
    assert "## Seed 0" in results.with_suffix(".md").read_text()
    kept = list((out / "seed0" / "readout").glob("*.npz"))
    assert len(kept) == 1  # the states, kept: a rerun reads them instead of loading the model
    again = subprocess.run(run.args, cwd=REPO, env=USER_ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, stderr_tail(again.stderr)
    assert json.loads(results.with_suffix(".json").read_text())["seeds"]["0"]["models"] == seed["models"]
    assert "train_collected:" in run.stderr and "train_collected:" not in again.stderr  # no forward pass


def test_prompt_states_match_a_whole_forward_pass_and_the_turn2_probe():
    """The shared start runs once on a cache; the states and P(search again) are the whole pass's."""
    import torch

    from bench.probing.probe import Turn2Prompt, p_search_again
    from bench.probing.readout import prompt_states
    from executor_sft.llm.transformers_backend import load_model, render_prompt

    model, tokenizer = load_model("offline:tiny-qwen3")
    system = {"role": "system", "content": "You answer one sub-query by searching. " * 20}
    prompts = [
        Turn2Prompt("person", [system, {"role": "user", "content": q}, {"role": "tool", "content": d}])
        for q, d in (("Where was Ann born?", "Doc 1 (Title: Ann) Ann was born in Oslo."),
                     ("When did Bo die?", "Doc 1 (Title: Bo) Bo died in 1901. Doc 2 (Title: Bo) A painter."))
    ]  # fmt: skip
    states, p = prompt_states(model, tokenizer, prompts)
    assert states.shape == (2, 2, model.config.hidden_size)
    for k, prompt in enumerate(prompts):
        text = render_prompt(tokenizer, prompt.messages, None, enable_thinking=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        np.testing.assert_allclose(states[k, 0], hs[len(hs) // 2][0, -1].numpy(), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(states[k, 1], hs[-1][0, -1].numpy(), atol=1e-4, rtol=1e-4)
        assert p[k] == pytest.approx(p_search_again(model, tokenizer, prompt), abs=1e-5)
