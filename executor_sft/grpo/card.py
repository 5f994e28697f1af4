"""The model card a post-training stage (distillation, GRPO) saves beside its weights.

Same card as SFT's (`executor_sft.sft.card`): base model, intended use, a quick start with the
prompt and tools the stage trained with, the outcome, the configuration, procedure and licence,
so that a checkpoint pushed to a hub from any stage says what it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers.utils import get_json_schema

from executor_sft.files import write_text
from executor_sft.sft.card import TrainingStage, model_card, prompts_card_section

DISTILL_STAGE = TrainingStage(
    tag="distillation",
    method="on-policy distillation",
    trainer="Trained with TRL's `DistillationTrainer` through "
    "`executor_sft.distill.ExecutorDistillationTrainer`: the student samples its own runs with the "
    "search tool and learns the teacher's per-token distribution on them; retrieved passages "
    "carry no loss.",
)
GRPO_STAGE = TrainingStage(
    tag="grpo",
    method="GRPO",
    trainer="Trained with TRL's `GRPOTrainer`: the executor samples a group of runs per sub-query "
    "in a search environment (`executor_sft.grpo.environment`) and is rewarded by the reward "
    "functions in the configuration below; retrieved passages carry no loss.",
)


def prompt_sources(script_args: Any) -> list[str]:
    """The prompts' files, as the arguments name them (one of dataset_name, rollouts, questions)."""
    if script_args.dataset_name is not None:
        return [str(script_args.dataset_name)]
    if script_args.rollouts:
        return [str(p) for p in script_args.rollouts]
    return [str(script_args.questions)]


def tool_schemas(tools: list[Any]) -> list[dict[str, Any]]:
    """The tools' JSON schemas as the chat template receives them."""
    return [get_json_schema(t) for t in tools]


def write_stage_card(
    trainer: Any,
    stage: TrainingStage,
    *,
    script_args: Any,
    base_model: str,
    config: dict[str, Any],
    outcome: list[str],
) -> Path:
    """Write `README.md` into the trainer's output directory (main process only); returns its path.

    `outcome`: the stage's summary lines (the ones it prints when it finishes)."""
    out = Path(trainer.args.output_dir)
    first = trainer.train_dataset[0]
    path = out / "README.md"
    text = model_card(
        title=out.name,
        base_model=base_model,
        model_dir=trainer.args.hub_model_id or str(out),
        first_row={"messages": first["prompt"], "tools": tool_schemas(trainer.tools)},
        record=prompts_card_section(
            data_sources=prompt_sources(script_args),
            n_prompts=len(trainer.train_dataset),
            steps=trainer.state.global_step,
            config=config,
        ),
        stage=stage,
        outcome="## Training outcome\n\n" + "\n".join(f"- {line}" for line in outcome) if outcome else None,
    )
    write_text(path, text)
    return path


def stage_settings(
    script_args: Any, training_args: Any, model_args: Any, names: tuple[str, ...]
) -> dict[str, Any]:
    """The settings that took effect: the model, the prompts' budget and retriever, and the named
    training arguments (those this TRL version has)."""
    return {
        "model": model_args.model_name_or_path,
        **{n: getattr(training_args, n) for n in names if hasattr(training_args, n)},
        "max_searches": script_args.max_searches,
        "retriever_top_k": script_args.retriever_top_k,
        "seed": training_args.seed,
    }
