"""One run of a post-training stage (GRPO, distillation): resume or skip, train, save, summary, card.

Here beside GRPO's prompts, tool, policy and card (`grpo.arguments`, `grpo.environment`,
`grpo.policy`, `grpo.card`), which distillation already builds on: `distill` imports `grpo`, never
the other way. Where a run starts, its record and its output folder's one writer come from the
training core every stage shares (`executor_sft.training`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from executor_sft.errors import ConfigError
from executor_sft.grpo.card import prompt_sources, stage_settings, write_stage_card
from executor_sft.grpo.policy import trainer_policy
from executor_sft.sft.card import TrainingStage
from executor_sft.training.hub_push import push_problem
from executor_sft.training.identity import as_recorded, base_identity, files_fingerprint, model_fingerprint
from executor_sft.training.interrupt import SaveOnInterrupt
from executor_sft.training.run_record import RecordInCheckpoints, RunRecord
from executor_sft.training.secrets import keep_tokens_off_disk
from executor_sft.training.start import start_run

LENGTH_FIELDS = frozenset({"max_steps", "num_train_epochs"})
"""Left out of a run's identity: extending a run is what a resume is for."""

logger = logging.getLogger(__name__)


def build_stage_trainer(
    trainer_cls: type,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    *,
    model: Any = None,
    processing_class: Any = None,
    pad_left: bool = False,
    **trainer_kwargs: Any,
):
    """The stage's TRL trainer on the policy `trainer_policy` resolves, as GRPO and distillation both build it.

    Unset `max_tool_calling_iterations` becomes `max_searches`: K = max_searches + 1 turns, every
    budgeted search and then the report. ModelConfig's LoRA applies, and its quantization when TRL
    loads the model. `pad_left` makes left padding the tokenizer's default, for a trainer that
    generates with it; `trainer_kwargs` are the stage's own (dataset, tools, rewards, callbacks)."""
    from trl import get_peft_config, get_quantization_config

    if training_args.max_tool_calling_iterations is None:
        training_args.max_tool_calling_iterations = script_args.max_searches
        logger.info("max_tool_calling_iterations unset: using max_searches=%d", script_args.max_searches)
    model, processing_class = trainer_policy(model_args, training_args, model, processing_class)
    if pad_left and processing_class is not None:
        processing_class.padding_side = "left"
    return trainer_cls(
        model=model,
        args=training_args,
        processing_class=processing_class,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args) if isinstance(model, str) else None,
        **trainer_kwargs,
    )


def stage_record(
    stage: TrainingStage,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    settings: tuple[str, ...],
    extra_config: dict[str, Any],
) -> RunRecord:
    """The stage's run record: the shared identity (prompt files by content, base model), the
    named training settings, the prompts' budget, the stage's own options and, for distillation,
    the teacher's fingerprint."""
    teacher = getattr(training_args, "teacher_model_name_or_path", None)
    identity = {
        **base_identity(training_args, model_args, files_fingerprint(prompt_sources(script_args))),
        **{
            n: getattr(training_args, n)
            for n in settings
            if hasattr(training_args, n) and n not in LENGTH_FIELDS
        },
        "max_searches": script_args.max_searches,
        "retriever_top_k": script_args.retriever_top_k,
        **extra_config,
        **({"teacher_fingerprint": model_fingerprint(teacher)} if teacher else {}),
    }
    return RunRecord(
        identity=as_recorded(identity),
        data_source=", ".join(prompt_sources(script_args)),
        config=stage_settings(script_args, training_args, model_args, settings) | extra_config,
        stage=stage.tag,
    )


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
    `output_dir` already holds a finished run of these data and settings.

    On the main process `outcome(trainer)` prints the stage's closing line and returns the card's
    outcome lines; the card records the model, the prompts' budget, the `settings` named (read after
    the build, which fills some in) and `extra_config`."""
    keep_tokens_off_disk(training_args)
    if problem := push_problem(training_args):
        raise ConfigError(problem)
    record = stage_record(stage, script_args, training_args, model_args, settings, extra_config or {})
    with start_run(training_args, record, fresh=script_args.fresh) as start:
        if start.finished is not None:
            return None
        interrupt, recorder = SaveOnInterrupt(), RecordInCheckpoints(start.record)
        overrides = overrides or {}
        callbacks = [*(overrides.get("callbacks") or []), recorder, interrupt]
        trainer = build(script_args, training_args, model_args, **{**overrides, "callbacks": callbacks})
        trainer.train(resume_from_checkpoint=start.resume)
        interrupt.check(training_args.output_dir, trainer.state.global_step, trainer.state.max_steps)
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json: how a relaunch knows the run is finished
        if trainer.accelerator.is_main_process:
            lines = outcome(trainer)
            write_stage_card(
                trainer,
                stage,
                script_args=script_args,
                base_model=model_args.model_name_or_path,
                config=stage_settings(script_args, training_args, model_args, settings)
                | (extra_config or {}),
                outcome=lines,
            )
            recorder.at(trainer.state.global_step).write(training_args.output_dir)
            trainer.accelerator.print(f"model saved to {training_args.output_dir}")
        return trainer


def steps_text(n: int) -> str:
    """'1 step', '2 steps'."""
    return f"{n} step" if n == 1 else f"{n} steps"
