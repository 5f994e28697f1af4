"""bench/decoupled_why.py's measures: AUC, balanced accuracy, the entity bootstrap, where gold sits,
answers read from Doc 1, and the hidden-state probe's fit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from script_modules import load_script


def _why():
    return load_script("bench/decoupled_why.py")


def test_auc_counts_ties_half_and_is_half_without_signal():
    why = _why()
    assert why.auc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert why.auc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]) == 0.0
    assert why.auc([1e-6] * 4, [True, True, False, False]) == 0.5  # a policy at 0 everywhere
    assert why.auc([0.5, 0.5], [True, True]) != why.auc([0.5, 0.5], [True, True])  # NaN: one class


def test_balanced_accuracy_ignores_the_label_shares():
    why = _why()
    truth = [True] + [False] * 9
    assert why.balanced_accuracy([False] * 10, truth) == 0.5  # 90% accurate, chance balanced
    assert why.balanced_accuracy(truth, truth) == 1.0


def test_the_interval_resamples_entities_with_all_their_prompts():
    why = _why()
    # Entity a's two prompts are ranked perfectly, b's inverted: over entities the AUC spreads.
    scores, missed, subjects = [0.9, 0.1, 0.1, 0.9], [True, False, True, False], ["a", "a", "b", "b"]
    f = why.by_entity_interval(why.auc, scores, missed, subjects)
    assert f["value"] == 0.5 and f["entities"] == 2
    assert f["low"] == 0.0 and f["high"] == 1.0
    one = why.by_entity_interval(why.auc, [0.9, 0.1], [True, False], ["a", "a"])
    assert one["low"] == one["high"] == 1.0


def test_gold_position_reads_the_first_search():
    why = _why()
    run = {"searches": [{"doc_ids": ["x", "g", "y"]}, {"doc_ids": ["g"]}], "_gold": "g"}
    assert why.gold_position(run) == "2"
    assert why.gold_position({**run, "_gold": "z"}) == "missing"
    assert why.gold_position({"searches": [], "_gold": "g"}) == "missing"


def test_answers_from_doc1_tells_a_copied_twin_from_the_gold(tmp_path):
    why = _why()
    tool = (
        "Doc 1 (Title: Bakok Skokkrirn) Bakok Skokkrirn is a novelist born in 1911.\n"
        "Doc 2 (Title: Skokkrirn Bakok) Skokkrirn Bakok is an entrepreneur born in 1956."
    )

    def rec(answer):
        return {
            "score": {"answer": answer, "golden_answers": ["1956"]},
            "run": {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": tool}]},
        }

    path = tmp_path / "eval.jsonl"
    path.write_text("\n".join(json.dumps(rec(a)) for a in ("1911", "1956", "")) + "\n")
    assert why.answers_from_doc1(path) == {
        "runs_with_answer": 2,
        "answer_in_doc1": 1,
        "doc1_holds_gold_answer": 0,
    }


def test_the_probe_fit_recovers_a_linear_signal_and_not_noise():
    why = _why()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16))
    y = x[:, 3] > 0.5  # imbalanced labels, one informative feature
    score = why.fit_logistic(x[:120], list(y[:120]))
    assert why.balanced_accuracy(list(score(x[120:]) > 0), list(y[120:])) > 0.85
    noise = rng.normal(size=(200, 16))
    score = why.fit_logistic(noise[:120], list(y[:120]))
    assert abs(why.balanced_accuracy(list(score(noise[120:]) > 0), list(y[120:])) - 0.5) < 0.2


def test_a_rerun_reuses_figures_only_for_the_same_weights_and_prompts(tmp_path, monkeypatch):
    why = _why()
    from bench.probing.probe import Turn2Prompt

    ckpt = tmp_path / "student-sft"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"weights v1")
    prompt = Turn2Prompt("person", [{"role": "user", "content": "q"}], None, "q")
    train, held = ([prompt], [True], ["e1"]), ([prompt], [False], ["e2"])
    key = why.fingerprint(str(ckpt), train, held)
    assert key == why.fingerprint(str(ckpt), train, held)
    assert key != why.fingerprint(str(ckpt), train, ([prompt], [True], ["e2"]))  # a label changed
    assert key != why.fingerprint("offline:smollm2", train, held)

    monkeypatch.setattr("executor_sft.llm.transformers_backend.load_model", lambda name: 1 / 0)
    earlier = {"fingerprint": key, "p_search": "kept"}
    assert why.checkpoint_figures(str(ckpt), train, held, earlier) is earlier  # no model loaded
    (ckpt / "model.safetensors").write_bytes(b"weights v2")
    with pytest.raises(ZeroDivisionError):  # other weights: it goes on to load the model
        why.checkpoint_figures(str(ckpt), train, held, earlier)
