"""Multi-agent GRPO's options and trainer build (`recipes/grpo_marl.py`; docs/post_training.md).

`MARLScriptArguments` are the options that are not TRL's: the questions (deep and wide, one
`schema.Question` JSONL), the retriever, the fixed roles (lead, answerer, the reference executor of
the substitution credit) as model mappings, the episode budgets, the credit rule and reweightings,
`train_lead`, the failure rules and the hybrid share. TRL's `GRPOConfig` and `ModelConfig` carry
the rest, as in the single-agent stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor_sft.errors import ConfigError
from executor_sft.grpo.arguments import parse_mapping
from executor_sft.grpo.marl import (
    LEAD,
    REFERENCE,
    EpisodeReward,
    MARLSettings,
    make_trainer_class,
    question_dataset,
)
from executor_sft.grpo.rollout_failures import FailureRules
from executor_sft.schema import Question, Role

if TYPE_CHECKING:
    from executor_sft.training.run_record import RunRecord

FAILURE_RULES = ("max_context_tokens", "exclude_turn_limit", "cut_is_context_limit", "failure_reward")
SAME_IN_SETTINGS = (
    *("credit", "token_level", "agent_level", "train_lead", "reward_metric"),
    *("max_tokens_per_turn", "deep_share", "loss_rows"),
)
"""Options passed to `MARLSettings` (or its `FailureRules`) under their own names."""


@dataclass
class MARLScriptArguments:
    """Multi-agent GRPO: whole episodes as samples (docs/post_training.md, "Multi-agent GRPO")."""

    questions: str | None = field(
        default=None, metadata={"help": "Questions JSONL (text and table questions)."}
    )
    max_examples: int | None = field(default=None, metadata={"help": "Use the first N questions."})
    retriever: dict | str | None = field(default=None, metadata={"help": "RetrieverConfig mapping."})
    backbone: dict | str | None = field(
        default=None, metadata={"help": "The fixed lead's model mapping (ignored with train_lead: true)."}
    )
    answerer: dict | str | None = field(
        default=None, metadata={"help": "The fixed answerer's model mapping."}
    )
    reference: dict | str | None = field(
        default=None, metadata={"help": "credit: substitution: the reference executor's model mapping."}
    )
    credit: str = field(default="shared", metadata={"help": "shared (WideSeek-R1) or substitution (ours)."})
    token_level: bool = field(
        default=True, metadata={"help": "Average an agent's advantage over its tokens."}
    )
    agent_level: bool = field(default=True, metadata={"help": "Average over the rollout's agents."})
    train_lead: bool = field(default=False, metadata={"help": "The policy also plays the lead."})
    reward_metric: str = field(default="f1", metadata={"help": "em or f1 (item F1 for a table)."})
    max_rounds: int = field(default=3, metadata={"help": "Lead turns (T)."})
    max_parallel: int = field(default=3, metadata={"help": "Sub-agents per lead turn (P)."})
    max_turns: int = field(default=3, metadata={"help": "Sub-agent turns (K)."})
    max_searches: int | None = field(default=None, metadata={"help": "Sub-agent searches (default K-1)."})
    parallel_tool_calls: int = field(default=5, metadata={"help": "Tool calls run per sub-agent turn."})
    tools: list[str] = field(default_factory=lambda: ["search"], metadata={"help": "The sub-agents' tools."})
    max_tokens_per_turn: int = field(default=256, metadata={"help": "New tokens per model call."})
    max_context_tokens: int | None = field(
        default=None,
        metadata={"help": "A trained call past this many tokens takes its rollout out of the loss."},
    )
    cut_is_context_limit: bool = field(
        default=True,
        metadata={"help": "A reply cut at max_tokens_per_turn counts as past the context limit."},
    )
    exclude_turn_limit: bool = field(
        default=True, metadata={"help": "A rollout past a turn limit leaves the loss."}
    )
    failure_reward: float = field(
        default=-1.0, metadata={"help": "Reward of an invalid-format or repetitive rollout."}
    )
    deep_share: float | None = field(
        default=None, metadata={"help": "Share of deep (text) questions in each batch (WideSeek-R1: 0.5)."}
    )
    loss_rows: int | None = field(
        default=4,
        metadata={
            "help": "Rows (trained model calls) per forward and backward of the loss; null: all at once."
        },
    )
    fresh: bool = field(default=False, metadata={"help": "Train from the start even over a finished run."})

    def __post_init__(self) -> None:
        for name in ("retriever", "backbone", "answerer", "reference"):
            setattr(self, name, parse_mapping(getattr(self, name), name))
        if self.credit not in ("shared", "substitution") and ":" not in self.credit:
            from executor_sft.grpo.credit import CREDITS

            CREDITS.check(self.credit)

    dataset_name = None
    rollouts = None
    """The stage card's prompt sources read `questions` (no GRPO rows or rollouts to build them from)."""

    @property
    def retriever_top_k(self) -> int:
        """Passages per search (the stage card records it under this name)."""
        return int((self.retriever or {}).get("k", 3))

    def settings(self, training_args: Any) -> MARLSettings:
        from executor_sft.agents.config import PipelineConfig

        pipeline = PipelineConfig(
            max_rounds=self.max_rounds,
            max_parallel=self.max_parallel,
            max_turns=self.max_turns,
            max_searches=self.max_searches,
            top_k=self.retriever_top_k,
            tools=list(self.tools),
            parallel_tool_calls=self.parallel_tool_calls,
            executor_roles=[Role.STUDENT],
            driver=Role.STUDENT,
            label_outcomes=False,
        )
        thinking = bool(
            (getattr(training_args, "chat_template_kwargs", None) or {}).get("enable_thinking", False)
        )
        rules = FailureRules(**{name: getattr(self, name) for name in FAILURE_RULES})
        same = {name: getattr(self, name) for name in SAME_IN_SETTINGS}
        return MARLSettings(pipeline=pipeline, enable_thinking=thinking, rules=rules, **same)


def load_questions(path: str, max_examples: int | None = None) -> list[Question]:
    from executor_sft.data.questions import load_questions as read

    if not Path(path).is_file():
        raise ConfigError(f"questions: {path}: no such file")
    rows = list(read(path))
    return rows[:max_examples] if max_examples is not None else rows


def build_role_model(spec: Any, name: str) -> Any:
    """A fixed role's chat model from its mapping (as evaluation configs write models) or 'module:attr'."""
    from executor_sft.grpo.train import build_chat_from_spec

    return build_chat_from_spec(spec, name)


def role_models(args: MARLScriptArguments) -> dict[str, Any]:
    """The fixed roles: the answerer, the lead unless trained, the reference for substitution."""
    models = {Role.ANSWERER: build_role_model(args.answerer, "answerer")}
    if not args.train_lead:
        models[LEAD] = build_role_model(args.backbone, "backbone")
    if args.credit == "substitution":
        models[REFERENCE] = build_role_model(args.reference, "reference")
    return models


def build_marl_trainer(
    script_args: MARLScriptArguments,
    training_args: Any,
    model_args: Any,
    *,
    model: Any = None,
    processing_class: Any = None,
    questions: list[Question] | None = None,
    retriever: Any = None,
    models: dict[str, Any] | None = None,
    trainer_cls: type | None = None,
    callbacks: list | None = None,
):
    """A ready multi-agent GRPO trainer; the keyword arguments override what the arguments would load."""
    from trl import GRPOTrainer

    from executor_sft.grpo.policy import trainer_policy

    settings = script_args.settings(training_args)
    if questions is None:
        if script_args.questions is None:
            raise ConfigError("questions: give the questions JSONL (text and table questions)")
        questions = load_questions(script_args.questions, script_args.max_examples)
    if retriever is None:
        from executor_sft.retrieval.config import RetrieverConfig, build_retriever

        retriever = build_retriever(RetrieverConfig.model_validate(script_args.retriever or {}))
    models = models if models is not None else role_models(script_args)
    model, processing_class = trainer_policy(model_args, training_args, model, processing_class)
    cls = make_trainer_class(trainer_cls or GRPOTrainer)
    return cls(
        model=model,
        args=training_args,
        processing_class=processing_class,
        reward_funcs=[EpisodeReward(settings.reward_metric)],
        train_dataset=question_dataset(questions),
        callbacks=callbacks,
        marl=settings,
        models=models,
        retriever=retriever,
    )


MARL_IDENTITY = (
    *("credit", "token_level", "agent_level", "train_lead", "deep_share", "reward_metric"),
    *("max_rounds", "max_parallel", "max_turns", "max_searches", "parallel_tool_calls", "tools"),
    *("max_tokens_per_turn", *FAILURE_RULES),
)
"""The multi-agent options a resumed or relaunched run must share (beside TRL's `MARL_SETTINGS`):
what decides a rollout and its reward; a step trained under other budgets is another run."""

MARL_SETTINGS = (
    "learning_rate",
    "max_steps",
    "per_device_train_batch_size",
    "num_generations",
    "temperature",
    "beta",
    "loss_type",
)


def check_before_loading(args: MARLScriptArguments, training_args: Any) -> None:
    """What a user can get wrong, as one ConfigError before any model loads."""
    if args.questions is None:
        raise ConfigError("questions: give the questions JSONL (text and table questions)")
    if not Path(args.questions).is_file():
        raise ConfigError(f"questions: {args.questions}: no such file")
    if not (args.retriever or {}).get("index") and not (args.retriever or {}).get("url"):
        raise ConfigError("retriever: give {index: DIR} (recipes/build_index.py) or {url: ...}")
    roles = ["answerer"] + ([] if args.train_lead else ["backbone"])
    roles += ["reference"] if args.credit == "substitution" else []
    for name in roles:
        if not isinstance(getattr(args, name), dict):
            raise ConfigError(f"{name}: give its model mapping, e.g. '{{model: Qwen/Qwen3-32B}}'")
    if training_args.loss_type != "dapo" or training_args.steps_per_generation not in (None, 1):
        raise ConfigError("multi-agent GRPO needs loss_type: dapo and steps_per_generation: 1")
    if training_args.num_iterations != 1:
        raise ConfigError("multi-agent GRPO needs num_iterations: 1")


def run_marl(
    script_args: MARLScriptArguments,
    training_args: Any,
    model_args: Any,
    *,
    extra_identity: dict[str, Any] | None = None,
    **overrides: Any,
):
    """Check, build, train (resuming the last complete checkpoint), save; None when already finished.

    `extra_identity`: a caller's own settings that a resume must share too (a bench's world and
    pool), recorded beside the multi-agent options."""
    from executor_sft.grpo.card import GRPO_STAGE
    from executor_sft.grpo.stage import run_stage

    check_before_loading(script_args, training_args)
    return run_stage(
        build_marl_trainer,
        GRPO_STAGE,
        script_args,
        training_args,
        model_args,
        settings=MARL_SETTINGS,
        outcome=_outcome,
        extra_config=_identity(script_args, extra_identity),
        overrides=overrides,
    )


def marl_record(
    script_args: MARLScriptArguments,
    training_args: Any,
    model_args: Any,
    extra_identity: dict[str, Any] | None = None,
) -> RunRecord:
    """The run record `run_marl` writes into each checkpoint and compares on resume: for a caller
    that checks several runs' folders before it loads any model."""
    from executor_sft.grpo.card import GRPO_STAGE
    from executor_sft.grpo.stage import stage_record

    extra = _identity(script_args, extra_identity)
    return stage_record(GRPO_STAGE, script_args, training_args, model_args, MARL_SETTINGS, extra)


def _identity(script_args: MARLScriptArguments, extra: dict[str, Any] | None) -> dict[str, Any]:
    return {name: getattr(script_args, name) for name in MARL_IDENTITY} | (extra or {})


def _outcome(trainer: Any) -> list[str]:
    """The closing line: the last step's reward, its within-group std and the failures counted."""
    logs = [h for h in trainer.state.log_history if "reward" in h]
    if not logs:
        return []
    last = logs[-1]
    keys = ["reward", "reward_std", *sorted(k for k in last if k.startswith("marl/failures/"))]
    summary = ", ".join(f"{k}={last[k]:.3f}" for k in keys if last.get(k) is not None)
    trainer.accelerator.print(
        f"multi-agent GRPO done: {trainer.state.global_step} steps; last log: {summary}"
    )
    return [f"last logged step: {summary}"]
