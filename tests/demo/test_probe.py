"""bench.probing (probe, callback, plot, convergence): the turn-2 probe as a
learning curve. The callback is tested on a real (tiny Qwen3) training run over real rows, probing
real turn-2 prompts of the scripted teacher on a tiny demo world's held-out sub-queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import TrainerCallback

from bench.probing.callback import (
    EPOCHS,
    PLATEAU,
    PlateauRule,
    ProbeCallback,
    read_records,
    stopped_by,
)
from bench.probing.convergence import ConvergenceConfig, split_heldout
from bench.probing.plot import plot_probe_curves
from bench.probing.probe import (
    AMBIGUOUS,
    CHOICES,
    PLAIN,
    Turn2Prompt,
    continuation_logprobs,
    mean_by_kind,
    p_search_each,
    summarise,
    turn2_prompts,
)
from executor_sft.demos.demo import DemoConfig, evaluate, train_demo
from executor_sft.files import read_jsonl

REPO = Path(__file__).resolve().parents[2]


def _prompt(kind: str) -> Turn2Prompt:
    return Turn2Prompt(kind, [{"role": "user", "content": "q"}])


def test_summarise_gives_the_difference_of_means_with_a_seeded_interval():
    prompts = [_prompt(PLAIN), _prompt(PLAIN), _prompt(AMBIGUOUS), _prompt(AMBIGUOUS)]
    probs = [0.1, 0.3, 0.6, 0.8]
    got = summarise(prompts, probs, seed=3)
    assert got.p_plain == pytest.approx(0.2) and got.p_ambiguous == pytest.approx(0.7)
    assert got.diff == pytest.approx(0.5)
    assert got.ci95[0] <= got.diff <= got.ci95[1]
    assert summarise(prompts, probs, seed=3) == got  # seeded
    assert mean_by_kind(prompts, probs) == pytest.approx({PLAIN: 0.2, AMBIGUOUS: 0.7})
    record = got.to_dict()
    assert record["n"] == {"plain": 2, "ambiguous": 2} and record["probs"]["ambiguous"] == [0.6, 0.8]
    with pytest.raises(ValueError, match="needs"):
        summarise(prompts[:2], probs[:2])


def test_plateau_needs_both_the_difference_and_the_loss_flat_after_min_epochs():
    rule = PlateauRule(patience=2, diff_tol=0.02, loss_tol=0.01, min_epochs=1.0)

    def rec(step, diff, loss, epoch=2.0, held=None):
        return {"step": step, "epoch": epoch, "diff": diff, "loss": loss, "heldout_loss": held}

    flat = [rec(1, 0.30, 1.00), rec(2, 0.31, 1.005), rec(3, 0.30, 1.001)]
    assert rule.reached(flat)
    assert not rule.reached(flat[:2])  # too few probes
    assert not rule.reached([{**r, "epoch": 0.5} for r in flat])  # before min_epochs
    assert not rule.reached([*flat[:2], rec(3, 0.40, 1.0)])  # the difference still moves
    assert not rule.reached([*flat[:2], rec(3, 0.30, 0.90)])  # the loss still falls
    # The held-out loss, where every record has one, is the loss judged.
    held = [rec(1, 0.3, 1.0, held=2.0), rec(2, 0.3, 0.5, held=2.001), rec(3, 0.3, 0.2, held=2.0)]
    assert rule.reached(held)
    assert stopped_by([*flat, {"stop": PLATEAU}]) == PLATEAU and stopped_by(flat) == EPOCHS


def test_split_heldout_is_seeded_and_keeps_order():
    rows = [{"i": i} for i in range(10)]
    train, held = split_heldout(rows, 3, seed=1)
    assert len(held) == 3 and len(train) == 7
    assert sorted(r["i"] for r in train + held) == list(range(10))
    assert [r["i"] for r in held] == sorted(r["i"] for r in held)
    assert split_heldout(rows, 3, seed=1) == (train, held)
    assert len(split_heldout(rows, 50, seed=1)[1]) == 5  # at most half


def test_plot_writes_a_png_with_a_panel_per_variant(tmp_path):
    def curve(shift):
        return [
            {"step": s, "p_plain": 0.2, "p_ambiguous": 0.2 + shift * s, "ci95": [0.0, 2 * shift * s]}
            for s in (2, 4, 6)
        ]

    records = curve(0.05)
    records[-1]["stop"] = PLATEAU
    path = plot_probe_curves(
        {"(a) naive": curve(0.0), "(c) full filter": records}, tmp_path / "img" / "p.png"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    width, height = Image.open(path).size
    assert width > height  # two panels side by side


@pytest.mark.slow
def test_p_search_is_a_probability_per_prompt_from_a_real_model(smollm2):
    from executor_sft.agents.tools import SEARCH_TOOL

    model, tokenizer = smollm2
    messages = [
        {"role": "system", "content": "Answer with the search tool."},
        {"role": "user", "content": "Who directed Paszund?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "Paszund"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "Doc 1 (Title: Paszund) Paszund is a film."},
    ]
    prompts = [Turn2Prompt(PLAIN, messages, [SEARCH_TOOL]), Turn2Prompt(AMBIGUOUS, messages, None)]
    was_training = model.training
    got = p_search_each(model, tokenizer, prompts)
    assert len(got) == 2 and all(0.0 < p < 1.0 for p in got)
    assert model.training == was_training
    assert set(mean_by_kind(prompts, got)) == {PLAIN, AMBIGUOUS}


def test_continuations_on_the_cached_prompt_score_as_the_whole_text_does(smollm2):
    """The probe runs the prompt once and each choice on a copy of its cache; the scores are
    those of one forward pass over prompt + choice."""
    import torch

    model, tokenizer = smollm2
    prefix = "<|im_start|>user\nWho directed Paszund?<|im_end|>\n<|im_start|>assistant\n"
    with torch.inference_mode():
        got = continuation_logprobs(model, tokenizer, prefix, CHOICES)
        for choice, score in zip(CHOICES, got, strict=True):
            p_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
            c_ids = tokenizer(prefix + choice, add_special_tokens=False)["input_ids"][len(p_ids) :]
            assert len(c_ids) > 1  # the cached path runs, not only the prompt's last logits
            logits = model(input_ids=torch.tensor([p_ids + c_ids])).logits[0].float().log_softmax(-1)
            whole = sum(logits[len(p_ids) - 1 + i, t].item() for i, t in enumerate(c_ids))
            assert abs(score - whole) < 1e-4


# --- the callback on a real SmolLM2 run ---


@pytest.fixture(scope="module")
def teacher_prompts(tmp_path_factory):
    """The scripted teacher's turn-2 prompts on 2 plain + 2 ambiguous held-out sub-queries of a
    tiny demo world (the probe's prompts in bench/demo_ablation.py)."""
    from executor_sft.demos.sample_data import bm25_index
    from executor_sft.eval.executor_eval import load_subqueries
    from executor_sft.synthetic import ScriptedTeacherExecutor, write_world

    out = tmp_path_factory.mktemp("probe-world")
    world = write_world(out / "world", 0, 120, 40)
    retriever, _ = bm25_index(out / "world" / "corpus.jsonl", out / "index")
    subs, counts = [], {PLAIN: 0, AMBIGUOUS: 0}
    for q in load_subqueries(out / "world" / "subqueries_test.jsonl"):
        kind = (q.model_extra or {}).get("type")
        if kind in counts and counts[kind] < 2:
            counts[kind] += 1
            subs.append(q)
    cfg = DemoConfig(seed=0, max_rounds=5, max_turns=3, top_k=3, eval_max_tokens=16)
    runs = out / "teacher.jsonl"
    evaluate(cfg, ScriptedTeacherExecutor(world), retriever, subs, "teacher", runs, show_progress=False)
    prompts = turn2_prompts(runs, (PLAIN, AMBIGUOUS))
    assert sorted(p.kind for p in prompts) == [PLAIN, PLAIN, AMBIGUOUS, AMBIGUOUS]
    return prompts


class _KillAt(TrainerCallback):
    """Stops the process at `step`'s log: after the probe there is written, before its checkpoint."""

    def __init__(self, step: int):
        self.step = step

    def on_log(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"killed at step {self.step}")


@pytest.mark.slow
def test_probe_callback_records_each_probe_step_once_across_a_killed_run(teacher_prompts, tmp_path):
    rows = list(read_jsonl(REPO / "data" / "sft.jsonl"))[:10]
    train_rows, held = rows[:8], rows[8:]
    sft = tmp_path / "sft.jsonl"
    sft.write_text("".join(json.dumps(r) + "\n" for r in train_rows), encoding="utf-8")
    # The tiny Qwen3 (its tokenizer is Qwen3's): the callback's records and resume are what is
    # tested here; the probe on SmolLM2 is the test above.
    cfg = DemoConfig(
        seed=0,
        model="offline:tiny-qwen3",
        batch_size=2,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_ratio=0.0,
        max_length=4096,
    )
    conv = ConvergenceConfig(epochs=1, probe_every=2, gathered_loss=True, heldout_rows=0, plateau=False)
    ckpt = tmp_path / "student-sft"
    path = ckpt / "probe.jsonl"

    def callback():
        return ProbeCallback(teacher_prompts, path, conv.probe_every, heldout_rows=held, max_length=4096)

    # 8 rows, batch 2: 4 steps; probes at 2 and 4. Killed at step 4 after its probe, before its checkpoint.
    with pytest.raises(KeyboardInterrupt):
        train_demo(cfg, sft, ckpt, convergence=conv, callbacks=[callback(), _KillAt(4)])
    first = read_records(path)
    assert [r["step"] for r in first] == [2, 4]
    assert (ckpt / "checkpoint-2").is_dir() and not (ckpt / "checkpoint-4").exists()

    # The rerun resumes at checkpoint-2, drops the record of step 4 and probes it again: once.
    cb = callback()
    result = train_demo(cfg, sft, ckpt, convergence=conv, callbacks=[cb])
    assert result.resumed_from and result.resumed_from.endswith("checkpoint-2")
    records = read_records(path)
    assert [r["step"] for r in records] == [2, 4] and records == cb.records
    assert records[0] == first[0]
    for r in records:
        assert 0.0 <= r["p_plain"] <= 1.0 and 0.0 <= r["p_ambiguous"] <= 1.0
        assert r["diff"] == pytest.approx(r["p_ambiguous"] - r["p_plain"])
        assert r["ci95"][0] <= r["diff"] + 1e-9 and r["diff"] <= r["ci95"][1] + 1e-9
        assert r["n"] == {"plain": 2, "ambiguous": 2} and len(r["probs"]["plain"]) == 2
        assert r["loss"] > 0 and r["heldout_loss"] > 0 and r["heldout_rows"] == 2
    assert cb.stopped == EPOCHS
