"""recipes/grpo_marl.py as a user runs it: the CPU config, paths overridden, a tiny checkpoint."""

from __future__ import annotations

import json

import pytest
from post_training import ROOT, run_recipe

pytestmark = pytest.mark.slow

CONFIG = ROOT / "recipes" / "configs" / "grpo_marl_cpu.yaml"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from executor_sft.retrieval import build_index
    from executor_sft.synthetic.world import write_world
    from tests.support import tiny_qwen3

    root = tmp_path_factory.mktemp("marl_recipe")
    write_world(root / "world", seed=0, n_entities=200, n_questions=40, wide_share=0.3)
    build_index(root / "world" / "corpus.jsonl", root / "index", bm25=True)
    model, tok = tiny_qwen3(seed=2)
    model.save_pretrained(root / "ckpt")
    tok.save_pretrained(root / "ckpt")
    return root


def _flags(root, **extra):
    world = str(root / "world")

    def scripted(m):
        return json.dumps({"backend": "executor_sft.synthetic.backend:scripted", "model": m, "world": world})

    flags = {
        "--model_name_or_path": str(root / "ckpt"),
        "--questions": str(root / "world" / "questions_train.jsonl"),
        "--retriever": json.dumps({"index": str(root / "index"), "k": 2}),
        "--backbone": scripted("backbone"),
        "--answerer": scripted("answerer"),
        "--reference": scripted("teacher"),
        "--max_steps": "2",
        "--num_generations": "2",
        "--per_device_train_batch_size": "4",
        "--max_tokens_per_turn": "16",
        "--output_dir": str(root / "out"),
        **extra,
    }
    return ["--config", str(CONFIG), *[x for kv in flags.items() for x in kv]]


def test_recipe_trains_two_steps_and_summarises_failures(workdir):
    proc = run_recipe("grpo_marl", *_flags(workdir, **{"--credit": "substitution"}))
    assert "multi-agent GRPO done: 2 steps" in proc.stdout
    assert "marl/failures/context_limit=" in proc.stdout and "reward_std=" in proc.stdout
    assert "rollouts:   0%|" in proc.stderr  # a step's rollouts show their progress
    assert (workdir / "out" / "model.safetensors").is_file()
    card = (workdir / "out" / "README.md").read_text()
    assert '"credit": "substitution"' in card and '"train_lead": false' in card
    # relaunched: the finished run is reported, not retrained
    again = run_recipe("grpo_marl", *_flags(workdir, **{"--credit": "substitution"}))
    assert "multi-agent GRPO done" not in again.stdout
    # other episode budgets than the finished run was trained with: refused, not reported as its result
    other = run_recipe(
        "grpo_marl", *_flags(workdir, **{"--credit": "substitution", "--max_turns": "5"}), expect=2
    )
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "max_turns (" in lines[0], other.stderr


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"--questions": "/nonexistent/q.jsonl"}, "questions: /nonexistent/q.jsonl: no such file"),
        ({"--loss_type": "grpo"}, "loss_type: dapo"),
        ({"--credit": "nope"}, "credit rule"),
    ],
)
def test_bad_input_is_one_line_before_loading(workdir, extra, says):
    proc = run_recipe(
        "grpo_marl", *_flags(workdir, **extra, **{"--output_dir": str(workdir / "bad")}), expect=2
    )
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], proc.stderr
    assert not (workdir / "bad").exists()
