"""On-policy distillation of the executor: the student samples its own search episodes, the teacher scores them.

`recipes/distill_executor.py` parses (DistillScriptArguments, DistillationConfig, ModelConfig)
and calls `run_distill`. TRL's `DistillationTrainer` (trl 1.16) generates with the student,
runs the search tool on each `<tool_call>` and generates again (up to
`max_tool_calling_iterations`, here `max_searches`), then trains the student on the teacher's
per-token distribution over the whole episode under a generalized JSD: `beta = 1` is the
reverse KL the search-agent blog distils with (the default). The tool-result tokens get
`tool_mask = 0`, so the loss (`completion_mask * tool_mask`) never trains on passages.

The prompts are those of GRPO (`grpo.arguments.load_prompt_dataset`: rows, rollouts or a
questions file), the tool is the runtime's search with its result text
(`grpo.environment.search_tool`), and the student and teacher load as in GRPO (`offline:`
aliases included). A teacher whose tokenizer is not the student's is refused before anything
loads. Each logging step adds `distill/teacher_kl` (the divergence the loss minimises: the
reverse KL at beta 1), `distill/searches` (searches per episode), `distill/zero_search` and
`distill/report` (shares of episodes without a search and ending with a report).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from trl import DistillationTrainer

from executor_sft.agents.executor_text import SEARCH_BUDGET_SPENT
from executor_sft.distill.tokenizers import check_same_tokenizer
from executor_sft.errors import ConfigError
from executor_sft.grpo.arguments import ExecutorDataArguments, load_prompt_dataset, load_retriever_from_args
from executor_sft.grpo.card import DISTILL_STAGE
from executor_sft.grpo.environment import search_tool
from executor_sft.grpo.policy import offline_dtype
from executor_sft.grpo.rewards import count_tool_calls, final_report
from executor_sft.grpo.stage import build_stage_trainer, run_stage, steps_text
from executor_sft.llm.offline import is_offline, load_offline
from executor_sft.llm.sources import check_source
from executor_sft.retrieval.base import Retriever

logger = logging.getLogger(__name__)
DISTILL_SETTINGS = (
    "teacher_model_name_or_path",
    "learning_rate",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_completion_length",
    "temperature",
    "beta",
    "max_tool_calling_iterations",
)
"""The training arguments the model card records."""


@dataclass
class DistillScriptArguments(ExecutorDataArguments):
    """Distillation's options that are not TRL's: the prompts and retrieval, as GRPO's.

    The teacher is TRL's own `teacher_model_name_or_path` (a checkpoint, a hub id, or an
    `offline:` alias), its dtype `teacher_model_init_kwargs: {dtype: bfloat16}`.
    """


class ExecutorDistillationTrainer(DistillationTrainer):
    """TRL's DistillationTrainer plus the runtime's budget notice and the executor's metrics.

    The notice: after the search that spends the budget the runtime adds a user message telling
    the executor to report (`Prompts.search_budget_spent`); the SFT rows the teacher learned from
    carry it. TRL's tool loop renders tool results only, so without it the last turn is sampled,
    and scored by the teacher, in a context that in the teacher's data always precedes another
    search: the student then learns to search again instead of reporting (measured, docs/post_training.md
    "What seed 1 showed"). Here the tool turn the loop runs last
    (`max_tool_calling_iterations`, = `max_searches`) is rendered followed by that user message,
    inside the tool-result span, so it is masked from the loss as the passages are. TRL's loop
    runs every episode's n-th tool turn in its n-th iteration (tools first, then the rendering of
    each result), so counting iterations counts the turn.
    """

    def __init__(self, *args: Any, budget_notice: str = SEARCH_BUDGET_SPENT, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.budget_notice = budget_notice
        self._tool_dict = {name: self._tool_called(tool) for name, tool in self._tool_dict.items()}
        self._tool_turn, self._tools_ran = 0, False

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, images, multimodal_fields):
        self._tool_turn, self._tools_ran = 0, False
        out = super()._tool_call_loop(
            prompts, prompt_ids, completion_ids, completions, images, multimodal_fields
        )
        episodes = out[1]
        mode = "train" if self.model.training else "eval"
        device = self.accelerator.device
        searches = self.accelerator.gather(
            torch.tensor([float(count_tool_calls(c)) for c in episodes], device=device)
        )
        reports = self.accelerator.gather(
            torch.tensor([float(final_report(c) is not None) for c in episodes], device=device)
        )
        self._metrics[mode]["distill/searches"].append(searches.mean().item())
        self._metrics[mode]["distill/zero_search"].append((searches == 0).float().mean().item())
        self._metrics[mode]["distill/report"].append(reports.mean().item())
        return out

    def _tool_called(self, tool: Any) -> Any:
        def call(**arguments: Any) -> Any:
            self._tools_ran = True
            return tool(**arguments)

        call.__name__ = tool.__name__
        return call

    def _get_tool_suffix_ids(self, tool_messages):
        if self._tools_ran:  # the first rendering after this iteration's tool calls: a new tool turn
            self._tool_turn, self._tools_ran = self._tool_turn + 1, False
        if self._tool_turn >= self.max_tool_calling_iterations:
            tool_messages = [*tool_messages, {"role": "user", "content": self.budget_notice}]
        return super()._get_tool_suffix_ids(tool_messages)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss = out[0] if return_outputs else out
        mode = "train" if self.model.training else "eval"
        # In training each micro-batch's loss is its share of the generation batch's token mean, so the
        # micro-batches of one step add up to it (entries are averaged when logged, hence the factor).
        share = self.args.gradient_accumulation_steps if mode == "train" else 1
        kl = self.accelerator.gather_for_metrics(loss.detach().reshape(1)).mean().item() * share
        self._metrics[mode]["distill/teacher_kl"].append(kl)
        return out


def _teacher(training_args: Any) -> Any:
    """The teacher as TRL takes it: a model object for an offline alias, else its path or hub id."""
    name = training_args.teacher_model_name_or_path
    if not is_offline(name):
        return name
    dtype = (training_args.teacher_model_init_kwargs or {}).get("dtype")
    training_args.teacher_model_init_kwargs = None  # the model is built here, not by TRL
    model, _ = load_offline(name, offline_dtype(dtype))
    return model


def check_distill_args(script_args: DistillScriptArguments, training_args: Any, model_args: Any) -> None:
    """What a user can get wrong, checked before any model loads (the tokenizers are read)."""
    if not model_args.model_name_or_path:
        raise ConfigError("model_name_or_path is required (the student: the SFT output directory)")
    if not training_args.teacher_model_name_or_path:
        raise ConfigError(
            "teacher_model_name_or_path is required (a checkpoint, a hub id or an offline: alias)"
        )
    if script_args.max_searches < 1:
        raise ConfigError(f"max_searches must be >= 1 for a search executor, got {script_args.max_searches}")
    check_source(model_args.model_name_or_path, "model_name_or_path")
    check_source(training_args.teacher_model_name_or_path, "teacher_model_name_or_path")
    check_same_tokenizer(
        model_args.model_name_or_path,
        training_args.teacher_model_name_or_path,
        revision=training_args.teacher_model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )


def build_distill_trainer(
    script_args: DistillScriptArguments,
    training_args,
    model_args,
    *,
    model: Any = None,
    teacher: Any = None,
    processing_class: Any = None,
    train_dataset: Any = None,
    retriever: Retriever | None = None,
    trainer_cls: type | None = None,
    callbacks: list | None = None,
):
    """A ready `ExecutorDistillationTrainer` (or `trainer_cls`): prompts, search tool, student, teacher.

    `model`/`teacher`/`processing_class`/`train_dataset`/`retriever` override what the arguments
    would load; with neither `model` nor `teacher` given, the tokenizers are compared first.
    """
    if model is None and teacher is None:
        check_distill_args(script_args, training_args, model_args)
    dataset = train_dataset if train_dataset is not None else load_prompt_dataset(script_args)
    retriever = retriever if retriever is not None else load_retriever_from_args(script_args)
    return build_stage_trainer(
        trainer_cls or ExecutorDistillationTrainer,
        script_args,
        training_args,
        model_args,
        model=model,
        processing_class=processing_class,
        pad_left=True,
        teacher_model=teacher if teacher is not None else _teacher(training_args),
        train_dataset=dataset,
        tools=[search_tool(retriever, script_args.retriever_top_k)],
        callbacks=callbacks,
    )


def run_distill(script_args: DistillScriptArguments, training_args, model_args, **overrides: Any):
    """Build the trainer, train (resuming the last complete checkpoint), save to `output_dir` (model
    and tokenizer); returns the trainer, or None when `output_dir` already holds a finished run."""
    return run_stage(
        build_distill_trainer,
        DISTILL_STAGE,
        script_args,
        training_args,
        model_args,
        settings=DISTILL_SETTINGS,
        outcome=_distill_outcome,
        overrides=overrides,
    )


def _distill_outcome(trainer: Any) -> list[str]:
    """The closing line (printed) and the card's outcome: teacher KL and searches, first -> last logged step."""
    logs = [h for h in trainer.state.log_history if "distill/teacher_kl" in h]
    if not logs:
        return []
    first, last = logs[0], logs[-1]
    outcome = [
        f"teacher KL {first['distill/teacher_kl']:.4f} -> {last['distill/teacher_kl']:.4f} "
        f"(first -> last logged step)",
        f"searches per episode {first['distill/searches']:.2f} -> {last['distill/searches']:.2f}",
    ]
    trainer.accelerator.print(
        f"distillation done: {steps_text(trainer.state.global_step)}; " + "; ".join(outcome)
    )
    return outcome
