"""What a run was trained with, so that a resume continues the same training.

Every checkpoint, and the output_dir of a finished run, holds `executor_sft_run.json`: the run's
identity (a fingerprint of its rows and the settings that shape what is learnt), its
configuration for the model card, the configurations of earlier stretches that a resume with
`--resume_with_changes` replaced, and the sum of the per-step losses so far (the Trainer forgets
the steps of earlier processes, so `train_loss` would cover only the last one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor_sft.errors import ConfigError

logger = logging.getLogger(__name__)

RUN_RECORD = "executor_sft_run.json"

# Length (max_steps, num_train_epochs) is left out: extending a run is what a resume is for.
# Memory and speed settings (gradient checkpointing, attention kernel, compile) are left out too.
_TRAINING_FIELDS = (
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "weight_decay",
    "optim",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "max_length",
    "packing",
    "padding_free",
    "bf16",
    "fp16",
    "seed",
    "data_seed",
)
_SCRIPT_FIELDS = ("enable_thinking", "overflow", "min_passage_tokens", "token_drift", "trainable_layers")


class ResumeChangedError(ConfigError):
    """A resume whose data or hyperparameters differ from those its checkpoint was trained with."""


@dataclass
class RunRecord:
    identity: dict[str, Any]
    data_source: str
    config: dict[str, Any]
    earlier: list[dict[str, Any]] = field(default_factory=list)
    loss_sum: float = 0.0
    global_step: int = 0

    def write(self, directory: str | Path) -> None:
        path = Path(directory) / RUN_RECORD
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2, default=str) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, directory: str | Path) -> RunRecord | None:
        """The record in `directory`, or None for a run made without one (or an unreadable one)."""
        path = Path(directory) / RUN_RECORD
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
        except (OSError, UnicodeDecodeError, ValueError, TypeError):
            return None


def data_fingerprint(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows' count and content hash: the same rows give the same fingerprint wherever the file lies."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        digest.update(b"\n")
    return {"rows": len(rows), "sha256": digest.hexdigest()}


def run_identity(
    script_args, training_args, model_args, rows: list[dict[str, Any]], training_template: str | None
) -> dict[str, Any]:
    """The data and the settings that, changed mid-run, make a resumed run a different training."""
    world = max(1, training_args.world_size)
    peft = None
    if model_args.use_peft:
        peft = {
            "r": model_args.lora_r,
            "alpha": model_args.lora_alpha,
            "dropout": model_args.lora_dropout,
            "target_modules": model_args.lora_target_modules,
            "modules_to_save": model_args.lora_modules_to_save,
        }
    identity = {
        "data": data_fingerprint(rows),
        "model": model_args.model_name_or_path,
        "model_revision": model_args.model_revision,
        "dtype": model_args.dtype,
        "peft": peft,
        "global_batch": training_args.per_device_train_batch_size
        * training_args.gradient_accumulation_steps
        * world,
        **{name: getattr(training_args, name, None) for name in _TRAINING_FIELDS},
        **{name: getattr(script_args, name) for name in _SCRIPT_FIELDS},
        "training_chat_template": (
            hashlib.sha256(training_template.encode("utf-8")).hexdigest() if training_template else None
        ),
    }
    return json.loads(json.dumps(identity, default=_plain))  # as it reads back from the record


def _plain(value: Any) -> Any:
    return getattr(value, "value", str(value))


def identity_changes(before: dict[str, Any], now: dict[str, Any]) -> dict[str, str]:
    """Each setting that differs, with `old -> new` in words."""
    return {
        key: f"{_shown(key, before.get(key))} -> {_shown(key, now.get(key))}"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    }


def _shown(key: str, value: Any) -> str:
    if key == "data" and isinstance(value, dict):
        return f"{value.get('rows')} rows sha256:{str(value.get('sha256'))[:12]}"
    if key == "training_chat_template" and value:
        return f"sha256:{value[:12]}"
    return json.dumps(value)


def continue_run(checkpoint: str, current: RunRecord, *, accept_changes: bool) -> RunRecord:
    """This run's record when it resumes `checkpoint`: refused (`ResumeChangedError`) when the
    checkpoint was trained with other data or settings, unless `accept_changes`; then the
    checkpoint's configuration joins `earlier`, for the card."""
    recorded = RunRecord.read(checkpoint)
    if recorded is None:
        logger.warning(
            "%s has no %s: resuming without checking it was trained with these data and settings",
            checkpoint,
            RUN_RECORD,
        )
        return dataclasses.replace(current, loss_sum=logged_loss_sum(checkpoint))
    changed = identity_changes(recorded.identity, current.identity)
    what = ", ".join(f"{key} ({change})" for key, change in changed.items())
    if changed and not accept_changes:
        raise ResumeChangedError(
            f"{checkpoint}: was trained with other settings than this run: {what}; run with its "
            "settings, pass --resume_with_changes true to continue it with these (the model card records "
            "both), or --fresh true to start over"
        )
    earlier = list(recorded.earlier)
    if changed:
        logger.warning("resuming %s with changed settings: %s", checkpoint, what)
        earlier.append(
            {
                "until_step": recorded.global_step,
                "changed": sorted(changed),
                "data_source": recorded.data_source,
                "identity": recorded.identity,
                "config": recorded.config,
            }
        )
    return dataclasses.replace(
        current, earlier=earlier, loss_sum=recorded.loss_sum, global_step=recorded.global_step
    )


def check_finished(output_dir: str, current: RunRecord) -> None:
    """Refuse to report a finished run trained with other data or settings as this run's result."""
    recorded = RunRecord.read(output_dir)
    changed = identity_changes(recorded.identity, current.identity) if recorded else {}
    if changed:
        what = ", ".join(f"{key} ({change})" for key, change in changed.items())
        raise ResumeChangedError(
            f"{output_dir}: holds a finished run trained with other settings than this run: {what}; "
            "pass --fresh true to train again with these, or choose another --output_dir"
        )


def logged_loss_sum(checkpoint: str | Path) -> float:
    """The per-step loss sum up to a checkpoint made without a record, from its logged losses
    (each log averages the steps since the previous one); steps after the last log count at the
    logged mean."""
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0.0
    total, covered, previous = 0.0, 0, 0
    for entry in state.get("log_history", []):
        if "loss" in entry and entry.get("step", 0) > previous:
            total += entry["loss"] * (entry["step"] - previous)
            covered += entry["step"] - previous
            previous = entry["step"]
    step = state.get("global_step", previous)
    if covered and step > previous:
        logger.warning(
            "steps %d-%d of %s were not logged: train_loss counts them at the mean",
            previous + 1,
            step,
            checkpoint,
        )
        total += total / covered * (step - previous)
    return total
