"""`train_executor`: passage-masked SFT of an executor with TRL's SFTTrainer.

Rows are tokenised here with `tokenize_example`'s rules (so the masks are ours, checked by
tests) and handed to SFTTrainer pre-tokenised (`input_ids` + `labels`), which TRL 1.16 uses
as is: it only pads, or packs (`packing=True`, bfd, with `position_ids` per sequence).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback
from transformers.trainer_pt_utils import nested_gather
from trl import ScriptArguments, SFTTrainer

from executor_sft.errors import ConfigError, InputError, MissingFileError
from executor_sft.llm.response_template import ensure_response_template
from executor_sft.llm.sources import check_source
from executor_sft.sft.card import config_record, executor_card_section, model_card
from executor_sft.sft.compile import compile_decoder_layers
from executor_sft.sft.data import DEFAULT_SFT_DATA, find_composition_report, load_sft_rows, row_counts
from executor_sft.sft.fidelity import FidelityReport, check_row, train_on_recorded
from executor_sft.sft.gathered_loss import add_gathered_lm_head
from executor_sft.sft.identity import run_identity
from executor_sft.sft.length import LengthReport, RowTooLongError, fit_row
from executor_sft.sft.models import DEFAULT_MODEL, check_model_options, load_tokenizer_and_model
from executor_sft.sft.partial import (
    TrainedPart,
    decoder_layers,
    freeze_below_top_layers,
    layer_limited_peft_config,
    top_layer_indices,
    trained_part,
)
from executor_sft.sft.render import IGNORE_INDEX
from executor_sft.sft.templates import generation_marker_problem, inference_chat_template
from executor_sft.sft.varlen import VARLEN_ATTENTION
from executor_sft.training.hub_push import push_problem
from executor_sft.training.interrupt import SaveOnInterrupt
from executor_sft.training.run_record import RecordInCheckpoints, RunRecord
from executor_sft.training.secrets import keep_tokens_off_disk
from executor_sft.training.start import RunStart, start_run

logger = logging.getLogger(__name__)


@dataclass
class SFTScriptArguments(ScriptArguments):
    """Data and executor-specific options (TRL's SFTConfig and ModelConfig hold the rest).

    `trl.ScriptArguments` gives the data fields (`dataset_name`, `dataset_config`,
    `dataset_train_split`, ...); only `dataset_name`'s default is ours: the sample data.
    """

    dataset_name: str = field(
        default=str(DEFAULT_SFT_DATA), metadata={"help": "sft.jsonl path, or a Hub dataset id."}
    )
    composition_report: str | None = field(
        default=None, metadata={"help": "The filter's report.json (default: found beside the JSONL)."}
    )
    enable_thinking: bool = field(
        default=False,
        metadata={"help": "Train think blocks (reasoning_content). Off: the empty think block is prompt."},
    )
    overflow: str = field(
        default="truncate_tool",
        metadata={"help": "Rows over max_length: 'truncate_tool' (shorten passages) or 'drop'."},
    )
    min_passage_tokens: int = field(
        default=24, metadata={"help": "A shortened passage line keeps at least this many tokens."}
    )
    token_drift: Literal["warn", "refuse", "recorded"] = field(
        default="warn",
        metadata={
            "help": "Rows whose re-rendered assistant turns differ from the ids their model sampled: "
            "'warn' (train on the rendering, count them), 'refuse' (drop them) or 'recorded' (train "
            "those turns on the sampled ids). Rows without ids of this vocabulary are trained as rendered."
        },
    )
    training_chat_template: str | None = field(
        default=None, metadata={"help": "Path to a training template with {%% generation %%} markers."}
    )
    auto_resume: bool = field(
        default=True, metadata={"help": "Resume from the last complete checkpoint in output_dir."}
    )
    resume_with_changes: bool = field(
        default=False,
        metadata={
            "help": "Resume a checkpoint trained with other data or hyperparameters (refused otherwise); "
            "the model card records each configuration."
        },
    )
    fresh: bool = field(
        default=False,
        metadata={"help": "Train from the start even if output_dir holds a finished or unfinished run."},
    )
    push_dataset_to_hub: bool = field(default=False, metadata={"help": "Also push the SFT rows to the Hub."})
    hub_dataset_id: str | None = field(
        default=None, metadata={"help": "Dataset repo (default: <model>-sft-data)."}
    )
    compile_layers: bool = field(
        default=False,
        metadata={
            "help": "torch.compile each decoder layer before training (GPU fast path; see docs/sft.md)."
        },
    )
    gathered_loss: bool = field(
        default=False,
        metadata={
            "help": "Project only the trained positions through the LM head (the same loss; TRL does "
            "this on CUDA only). The CPU fast path; see docs/sft.md."
        },
    )
    trainable_layers: int | None = field(
        default=None,
        metadata={
            "help": "Train only the top N decoder layers (and the final norm); with --use_peft, put "
            "LoRA on those layers only. Default: every layer."
        },
    )

    def __post_init__(self):
        if self.trainable_layers is not None and self.trainable_layers < 1:
            raise ConfigError(f"trainable_layers={self.trainable_layers}: give at least 1, or leave it unset")


@dataclass
class TrainResult:
    output_dir: str
    metrics: dict[str, float]
    length_report: LengthReport
    resumed_from: str | None
    fidelity: FidelityReport | None = None
    """How the rows' trained tokens compared with their sampled ids (None: a finished run, not re-read)."""


def prepare_dataset(
    rows: list[dict[str, Any]],
    tokenizer,
    max_length: int | None,
    *,
    enable_thinking: bool = False,
    overflow: str = "truncate_tool",
    min_passage_tokens: int = 24,
    chat_template: str | None = None,
    disable_progress: bool = False,
    fidelity: FidelityReport | None = None,
):
    """Tokenise rows into a `datasets.Dataset` of `input_ids`/`labels`, fitting long ones.

    Each row's assistant spans are compared with the ids its model sampled (`sft.fidelity`);
    `fidelity` holds the `token_drift` policy (default "warn") and receives the counts."""
    from datasets import Dataset

    report = LengthReport(max_length=max_length, policy=overflow)
    fidelity = fidelity if fidelity is not None else FidelityReport("warn")
    input_ids, labels = [], []
    fitting = {"enable_thinking": enable_thinking, "chat_template": chat_template, "overflow": overflow}
    for row in tqdm(rows, desc="tokenising SFT rows", disable=disable_progress):
        report.rows += 1
        try:
            fit = fit_row(row, tokenizer, max_length, min_line_tokens=min_passage_tokens, **fitting)
        except RowTooLongError as e:
            report.dropped += 1
            report.dropped_ids.append(str(row.get("source_run_id", report.rows - 1)))
            logger.info("dropping row %s: %s", row.get("source_run_id"), e)
            continue
        example = _apply_token_drift(row, fit.example, tokenizer, fidelity, max_length)
        if example is None:
            continue
        report.count(row["messages"], fit)
        input_ids.append(example["input_ids"])
        labels.append(example["labels"])
    if fidelity.any_ids:
        logger.warning("%s", fidelity.summary())
        for line in fidelity.examples:
            logger.info("token drift in %s", line)
    if input_ids and all(label == IGNORE_INDEX for row in labels for label in row):
        raise InputError(
            f"no row has a trained token ({report.rows} rows): the chat template's generation markers "
            "mark nothing in them; check the training template's {% generation %} blocks"
        )
    if not input_ids:
        refused = f"; {fidelity.summary()}" if fidelity.any_ids else ""
        raise InputError(
            f"no trainable rows: {report.summary()}{refused}; raise max_length or shorten the rows"
        )
    return Dataset.from_dict({"input_ids": input_ids, "labels": labels}), report


def _apply_token_drift(
    row: dict[str, Any],
    example: dict[str, list[int]],
    tokenizer,
    fidelity: FidelityReport,
    max_length: int | None,
) -> dict[str, list[int]] | None:
    """The example to train on under `fidelity.policy` (None: the row is refused), counted."""
    checked = check_row(row, example, tokenizer)
    row_id = str(row.get("source_run_id", ""))
    fidelity.add(str(row.get("stratum", "unknown")), checked, row_id)
    if checked.status != "drift":
        return example
    if fidelity.policy == "refuse":
        fidelity.refused += 1
        return None
    if fidelity.policy == "recorded" and checked.recorded:
        recorded = train_on_recorded(example, checked)
        if max_length is not None and len(recorded["input_ids"]) > max_length:
            fidelity.refused += 1  # the sampled ids do not fit where the rendering did
            return None
        fidelity.trained_on_recorded += 1
        return recorded
    return example


class ExecutorSFTTrainer(SFTTrainer):
    """SFTTrainer whose model card carries the executor data record, which never builds a KV
    cache in training (with a cache, packed sequences attend to each other), and whose
    checkpoints carry the run record (`RecordInCheckpoints`): what they were trained with, and
    the loss sum that lets `train_loss` span every process of a resumed run.

    The fast path's options: `gathered_loss` (the LM head only at trained positions) and
    `trainable_layers` (the top N decoder layers train; under PEFT the adapter is placed on
    them by `layer_limited_peft_config` before this trainer wraps the model)."""

    def __init__(
        self,
        *args,
        card_section: str | None = None,
        compile_layers: bool = False,
        run_record: RunRecord | None = None,
        gathered_loss: bool = False,
        trainable_layers: int | None = None,
        **kwargs,
    ):
        self.card_section, self.run_record = card_section, run_record
        super().__init__(*args, **kwargs)
        self.steps_loss = torch.zeros((), device=self.args.device)  # this process's step losses, summed
        if run_record is not None:
            self.recorder = RecordInCheckpoints(run_record, self.loss_sum)
            self.add_callback(self.recorder)
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        self.trained_part: TrainedPart | None = None
        if trainable_layers is not None:
            if base is self.model:
                self.trained_part = freeze_below_top_layers(self.model, trainable_layers)
            else:
                total = len(decoder_layers(base)[1])
                self.trained_part = trained_part(
                    self.model, top_layer_indices(total, trainable_layers), total
                )
            logger.warning("training %s", self.trained_part.summary())
        if gathered_loss:
            add_gathered_lm_head(base)
        if compile_layers:
            count = compile_decoder_layers(self.model)
            logger.info("compiled %d decoder layers", count)

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)  # what the Trainer adds to its own sum
        self.steps_loss += loss.nan_to_num(0.0, 0.0, 0.0) if self.args.logging_nan_inf_filter else loss
        return loss

    def loss_sum(self) -> float:
        """The per-step loss sum of the run: the resumed checkpoint's plus this process's steps,
        averaged over processes (a collective: every process calls it)."""
        gathered = nested_gather(self.steps_loss, self.args.parallel_mode)
        return self.run_record.loss_sum + gathered.mean().item()

    def log(self, logs, *args, **kwargs):
        # The Trainer's train_loss averages only this process's steps; a resumed run's spans all.
        if "train_loss" in logs and self.run_record is not None:
            logs["train_loss"] = self.loss_sum() / max(self.state.global_step, 1)
        super().log(logs, *args, **kwargs)

    def compute_loss(self, model, inputs, *args, **kwargs):
        inputs["use_cache"] = False
        return super().compute_loss(model, inputs, *args, **kwargs)

    def create_model_card(
        self, model_name=None, dataset_name=None, tags=None, *, base_model=None, first_row=None
    ):
        if not self.is_world_process_zero():
            return
        text = model_card(
            title=model_name or Path(self.args.output_dir).name,
            base_model=base_model or "unknown",
            model_dir=self.args.hub_model_id or self.args.output_dir,
            first_row=first_row or {},
            record=self.card_section or "",
            log_history=self.state.log_history,
        )
        (Path(self.args.output_dir) / "README.md").write_text(text, encoding="utf-8")


@contextlib.contextmanager
def _no_tied_weights_warning(model):
    """No missing-keys warning on a resume when only tied weights are missing (saved once, e.g. an
    lm_head tied to the embeddings: loading the one copy fills both). No public hook sees the load
    (transformers 5.17 `Trainer._load_from_checkpoint`, trainer.py:3556, hands it to the private
    `_issue_warnings_after_load`, :3912), so a filter on its logger matches the line's text."""
    prefix = "There were missing keys in the checkpoint model loaded: "

    def keep(record: logging.LogRecord) -> bool:
        text = record.getMessage()
        missing = text.startswith(prefix) and set(ast.literal_eval(text[len(prefix) : -1]))
        return not missing or not missing <= _tied_parameter_names(model)

    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.addFilter(keep)
    try:
        yield
    finally:
        trainer_logger.removeFilter(keep)


def _tied_parameter_names(model) -> set[str]:
    """Names of parameters that share storage with an earlier parameter (e.g. a tied lm_head)."""
    first: dict[int, str] = {}
    params = model.named_parameters(remove_duplicate=False)
    return {name for name, param in params if first.setdefault(param.data_ptr(), name) != name}


@contextlib.contextmanager
def _quiet_library_output(training_args):
    """Library progress bars for steps a user does not wait on (TRL's dataset passes over rows we
    already tokenised, shard writing)."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets_bars, hf_bars = datasets.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if datasets_bars:
            datasets.enable_progress_bars()
        if hf_bars:
            hf_logging.enable_progress_bar()


def name_the_cpu_accelerator() -> None:
    """Without CUDA, tell DeepSpeed it runs on the CPU before anything imports it: otherwise
    parsing the training arguments makes it probe for a device and print a warning into the
    output of every CPU run. Call before building `SFTConfig`."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _finished(script_args: SFTScriptArguments, training_args, start: RunStart) -> TrainResult:
    """The result of the finished run `start` found (its line was printed on rank 0)."""
    done = start.finished or {}
    loss = next((h["train_loss"] for h in reversed(done.get("log_history", [])) if "train_loss" in h), None)
    report = LengthReport(max_length=training_args.max_length, policy=script_args.overflow)
    return TrainResult(training_args.output_dir, {"train_loss": loss}, report, None)


def _training_template(script_args: SFTScriptArguments) -> str | None:
    if not script_args.training_chat_template:
        return None
    path = Path(script_args.training_chat_template)
    if not path.is_file():
        raise MissingFileError(f"{path}: training chat template not found (--training_chat_template)")
    text = path.read_text(encoding="utf-8")
    if problem := generation_marker_problem(text):
        raise ConfigError(
            f"{path}: {problem}; wrap each assistant turn's text in {{% generation %}}...{{% endgeneration %}} "
            "(--training_chat_template)"
        )
    return text


def _push(
    trainer, script_args: SFTScriptArguments, training_args, rows: list[dict[str, Any]], name: str
) -> None:
    """The model (`push_to_hub`) and the rows it was trained on (`push_dataset_to_hub`) to the Hub."""
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=str(script_args.dataset_name))
    if script_args.push_dataset_to_hub and trainer.is_world_process_zero():
        from datasets import Dataset

        repo = script_args.hub_dataset_id or f"{trainer.hub_model_id or name}-sft-data"
        Dataset.from_list(rows).push_to_hub(repo, private=bool(training_args.hub_private_repo))


def train_executor(
    script_args: SFTScriptArguments,
    training_args,
    model_args,
    *,
    callbacks: list[TrainerCallback] | None = None,
) -> TrainResult:
    """Load rows, check what a resume would continue, tokenise with passage masks, train, save
    (model, inference-template tokenizer, card, run record). `callbacks` go to the Trainer."""
    from transformers import set_seed

    set_seed(training_args.seed)
    keep_tokens_off_disk(training_args)
    if problem := push_problem(training_args):
        raise ConfigError(problem)
    if model_args.attn_implementation == VARLEN_ATTENTION and not (
        training_args.packing or training_args.padding_free
    ):
        raise ConfigError(f"attn_implementation={VARLEN_ATTENTION} needs packing=true or padding_free=true")
    model_args.model_name_or_path = model_args.model_name_or_path or DEFAULT_MODEL
    check_source(model_args.model_name_or_path, "model_name_or_path")
    check_model_options(model_args, training_args, script_args.trainable_layers)
    training_template = _training_template(script_args)
    rows = load_sft_rows(
        script_args.dataset_name, script_args.dataset_train_split, script_args.dataset_config
    )
    record = RunRecord(
        identity=run_identity(script_args, training_args, model_args, rows, training_template),
        data_source=str(script_args.dataset_name),
        config=config_record(script_args, training_args, model_args),
    )
    # Ours before anything is written into it; after the rows, so a bad row leaves no folder behind.
    start = start_run(
        training_args,
        record,
        fresh=script_args.fresh,
        auto_resume=script_args.auto_resume,
        accept_changes=script_args.resume_with_changes,
    )
    with start:
        if start.finished is not None:
            return _finished(script_args, training_args, start)
        return _train(script_args, training_args, model_args, rows, training_template, start, callbacks)


def _train(script_args, training_args, model_args, rows, training_template, start: RunStart, callbacks):
    """Tokenise, train from `start`, save model, card and record; push if asked."""
    from trl import get_peft_config

    resume, record = start.resume, start.record
    tokenizer, model = load_tokenizer_and_model(model_args, training_args)
    # Saved with the model: the template whose turn prompts are the prefixes trained on.
    inference_template = tokenizer.chat_template = inference_chat_template(tokenizer)
    ensure_response_template(tokenizer)  # GRPO and distillation parse the saved executor's replies with it
    counts = row_counts(rows)
    composition = find_composition_report(script_args.dataset_name, script_args.composition_report)
    fidelity = FidelityReport(script_args.token_drift)
    with training_args.main_process_first(desc="tokenising SFT rows"):
        dataset, length_report = prepare_dataset(
            rows,
            tokenizer,
            training_args.max_length,
            enable_thinking=script_args.enable_thinking,
            overflow=script_args.overflow,
            min_passage_tokens=script_args.min_passage_tokens,
            chat_template=training_template,
            disable_progress=not training_args.should_log or training_args.disable_tqdm,
            fidelity=fidelity,
        )
    logger.warning("SFT data %s: %s", script_args.dataset_name, length_report.summary())
    if cue := length_report.cue():
        logger.warning("SFT data %s: %s", script_args.dataset_name, cue)
    if not training_args.assistant_only_loss:
        logger.info("assistant-only loss comes from executor_sft's masks whatever assistant_only_loss says")
    # Labels already carry the mask; TRL must not re-render the rows with its own template.
    training_args = dataclasses.replace(training_args, assistant_only_loss=False, completion_only_loss=None)

    card = executor_card_section(
        data_source=str(script_args.dataset_name),
        row_counts=counts,
        composition_report=composition,
        length_summary=length_report.to_dict(),
        fidelity_summary=fidelity.to_dict() if fidelity.any_ids else None,
        config=record.config,
        earlier=record.earlier,
    )
    peft_config = layer_limited_peft_config(get_peft_config(model_args), model, script_args.trainable_layers)
    if script_args.trainable_layers is not None and training_args.gradient_checkpointing:
        # Reentrant checkpointing gives no gradient to layers whose inputs need none (the frozen ones below).
        kwargs = {**(training_args.gradient_checkpointing_kwargs or {}), "use_reentrant": False}
        training_args = dataclasses.replace(training_args, gradient_checkpointing_kwargs=kwargs)
    interrupt = SaveOnInterrupt()
    with _quiet_library_output(training_args):
        trainer = ExecutorSFTTrainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            card_section=card,
            compile_layers=script_args.compile_layers,
            run_record=record,
            gathered_loss=script_args.gathered_loss,
            trainable_layers=script_args.trainable_layers,
            callbacks=[*(callbacks or []), interrupt],
        )
    with _no_tied_weights_warning(trainer.model):
        result = trainer.train(resume_from_checkpoint=resume)
    interrupt.check(training_args.output_dir, trainer.state.global_step, trainer.state.max_steps)
    with _quiet_library_output(training_args):
        trainer.save_model(training_args.output_dir)
    # The tokenizer must go out with the template used at inference, never the training one.
    assert tokenizer.chat_template == inference_template, "training template leaked into the tokenizer"
    metrics = dict(result.metrics)
    metrics["train_rows"] = len(dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    final_record = trainer.recorder.at(trainer.state.global_step)  # on every process: it gathers
    if training_args.should_save:
        final_record.write(training_args.output_dir)
    name = (training_args.hub_model_id or Path(training_args.output_dir).name).split("/")[-1]
    trainer.create_model_card(model_name=name, base_model=model_args.model_name_or_path, first_row=rows[0])
    _push(trainer, script_args, training_args, rows, name)
    if trainer.is_world_process_zero():
        print(
            f"[executor_sft] trained {model_args.model_name_or_path} on {len(dataset)} rows "
            f"({length_report.summary()}"
            + (f"; {fidelity.summary()}" if fidelity.any_ids else "")
            + f"); train_loss={metrics.get('train_loss', float('nan')):.4g}; "
            f"saved to {training_args.output_dir}"
        )
    return TrainResult(training_args.output_dir, metrics, length_report, resume, fidelity)
