"""One run of a post-training stage (GRPO, distillation): resume or skip, train, save, summary, card.

Here beside GRPO's prompts, tool, policy and card (`grpo.arguments`, `grpo.environment`,
`grpo.policy`, `grpo.card`), which distillation already builds on: `distill` imports `grpo`, never
the other way, so the shared run adds no import edge (both are layer 3, and `sft.checkpoints`
below them decides where a stage starts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from executor_sft.grpo.card import stage_settings, write_stage_card
from executor_sft.sft.card import TrainingStage
from executor_sft.sft.checkpoints import begin_stage


def run_stage(
    build: Callable[..., Any],
    stage: TrainingStage,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    *,
    settings: tuple[str, ...],
    outcome: Callable[[Any], list[str]],
    extra_config: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
):
    """Build the trainer (`build(script_args, training_args, model_args, **overrides)`), train
    (resuming the last complete checkpoint), save to `output_dir`; returns the trainer, or None when
    `output_dir` already holds a finished run.

    On the main process `outcome(trainer)` prints the stage's closing line and returns the card's
    outcome lines; the card records the model, the prompts' budget, the `settings` named (read after
    the build, which fills some in) and `extra_config`."""
    start = begin_stage(training_args, fresh=script_args.fresh)
    if start.finished is not None:
        return None
    trainer = build(script_args, training_args, model_args, **(overrides or {}))
    trainer.train(resume_from_checkpoint=start.resume)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json: how a relaunch knows the run is finished
    if trainer.accelerator.is_main_process:
        lines = outcome(trainer)
        write_stage_card(
            trainer,
            stage,
            script_args=script_args,
            base_model=model_args.model_name_or_path,
            config={
                **stage_settings(script_args, training_args, model_args, settings),
                **(extra_config or {}),
            },
            outcome=lines,
        )
        trainer.accelerator.print(f"model saved to {training_args.output_dir}")
    return trainer


def steps_text(n: int) -> str:
    """'1 step', '2 steps'."""
    return f"{n} step" if n == 1 else f"{n} steps"
