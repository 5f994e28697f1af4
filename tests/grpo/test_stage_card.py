"""The post-training stages' model card, from a finished trainer's parts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from executor_sft.grpo.card import DISTILL_STAGE, GRPO_STAGE, prompt_sources, write_stage_card
from executor_sft.grpo.environment import search_tool

REPO = Path(__file__).resolve().parents[2]

PROMPT = [
    {"role": "system", "content": "You are a research sub-agent."},
    {"role": "user", "content": "Who wrote Vuthmaessa?"},
]


def _trainer(out: Path, steps: int = 3):
    return SimpleNamespace(
        args=SimpleNamespace(output_dir=str(out), hub_model_id=None),
        train_dataset=[{"prompt": PROMPT}, {"prompt": PROMPT}],
        tools=[search_tool(retriever=None, top_k=3)],
        state=SimpleNamespace(global_step=steps),
    )


def _args(**sources):
    return SimpleNamespace(**{"dataset_name": None, "rollouts": None, "questions": None, **sources})


def test_the_card_names_the_stage_prompts_tools_outcome_and_settings(tmp_path):
    out = tmp_path / "grpo-x"
    path = write_stage_card(
        _trainer(out),
        GRPO_STAGE,
        script_args=_args(questions=str(REPO / "data" / "rollouts.jsonl")),
        base_model="offline:tiny-qwen3",
        config={"model": "offline:tiny-qwen3", "reward_funcs": ["outcome"]},
        outcome=["last logged step: reward=0.250"],
    )
    card = path.read_text(encoding="utf-8")
    assert path == out / "README.md"
    assert "tags: [executor_sft, grpo, trl, search-agent]" in card and "license: apache-2.0" in card
    assert "# grpo-x" in card and "(GRPO) from `offline:tiny-qwen3`" in card
    assert "3 steps on runs it sampled itself from 2 prompts" in card
    assert "Prompts: `data/rollouts.jsonl` — 2 sub-queries." in card and str(REPO) not in card
    assert "'Who wrote Vuthmaessa?'" in card and '"name": "search"' in card  # the quick start
    assert "## Training outcome\n\n- last logged step: reward=0.250" in card
    assert '"reward_funcs": [\n    "outcome"\n  ]' in card
    assert "GRPOTrainer" in card.split("## Training procedure")[1]


def test_without_a_logged_outcome_the_card_has_no_outcome_section(tmp_path):
    outside = tmp_path / "mine" / "rollouts.jsonl"
    outside.parent.mkdir()
    outside.write_text("{}\n", encoding="utf-8")
    card = write_stage_card(
        _trainer(tmp_path / "d", steps=1),
        DISTILL_STAGE,
        script_args=_args(rollouts=[str(outside), "hf://org/prompts"]),
        base_model="some-org/some-model",
        config={},
        outcome=[],
    ).read_text(encoding="utf-8")
    assert "## Training outcome" not in card and "1 steps on runs it sampled itself from 2 prompts" in card
    assert (
        "Prompts: `rollouts.jsonl` (a local file), [org/prompts](https://huggingface.co/datasets/org/prompts)"
        in card
    )
    assert str(outside.parent) not in card
    assert (
        "tags: [executor_sft, distillation, trl, search-agent]" in card
        and "base_model: some-org/some-model" in card
    )
    assert "DistillationTrainer" in card.split("## Training procedure")[1]


def test_the_prompt_sources_are_the_ones_the_arguments_name():
    assert prompt_sources(_args(dataset_name="rows.jsonl")) == ["rows.jsonl"]
    assert prompt_sources(_args(rollouts=["r1.jsonl", "r2.jsonl"])) == ["r1.jsonl", "r2.jsonl"]
    assert prompt_sources(_args(questions="hf://org/set")) == ["hf://org/set"]
