"""What a run was trained with, so that a relaunch or resume continues the same training.

Every checkpoint, and the output_dir of a finished run, holds `executor_sft_run.json`: the run's
identity (`training.identity`: data, base model and the settings that shape what is learnt), its
configuration for the model card, the configurations of earlier stretches that a resume with
`--resume_with_changes` replaced, and the sum of the per-step losses so far (the Trainer forgets
the steps of earlier processes, so `train_loss` would cover only the last one). Every training
stage (SFT, distillation, GRPO) writes and checks the same record.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from executor_sft.errors import ConfigError
from executor_sft.files import write_text
from executor_sft.training.identity import RUN_RECORD

logger = logging.getLogger(__name__)

__all__ = [
    "RUN_RECORD",
    "RecordInCheckpoints",
    "ResumeChangedError",
    "RunRecord",
    "check_finished",
    "describe_changes",
    "continue_run",
    "identity_changes",
]


class ResumeChangedError(ConfigError):
    """A resume or relaunch whose data or settings differ from those its run was trained with."""


@dataclass
class RunRecord:
    identity: dict[str, Any]
    data_source: str
    config: dict[str, Any]
    stage: str = "sft"
    earlier: list[dict[str, Any]] = field(default_factory=list)
    loss_sum: float = 0.0
    global_step: int = 0

    def write(self, directory: str | Path) -> None:
        """Atomically: a kill while writing leaves the old record or none, never a cut one."""
        text = json.dumps(dataclasses.asdict(self), indent=2, default=str) + "\n"
        write_text(Path(directory) / RUN_RECORD, text)

    @classmethod
    def read(cls, directory: str | Path) -> RunRecord | None:
        """The record in `directory`, or None when it is missing or unreadable (cut, not JSON)."""
        path = Path(directory) / RUN_RECORD
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError):
            return None


class RecordInCheckpoints(TrainerCallback):
    """Writes the run record into each checkpoint after the Trainer's files: one without it (the
    process died in between) is incomplete, so a resume never skips the identity check.
    `loss_sum` gives the run's loss sum so far; without it the record keeps the one it began with.

    It also takes over `save_total_limit` from the Trainer, which deletes older checkpoints before
    the new one has its record: with a limit of 1, a kill in between left no complete checkpoint
    and the relaunch started from step 0. Here the older ones go only after the record is written.
    (Runs with `load_best_model_at_end` keep the Trainer's rotation, which knows the best one.)"""

    def __init__(self, record: RunRecord, loss_sum: Callable[[], float] | None = None):
        self.record, self.loss_sum = record, loss_sum
        self.keep: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if args.save_total_limit and not args.load_best_model_at_end:
            self.keep, args.save_total_limit = args.save_total_limit, None

    def on_train_end(self, args, state, control, **kwargs):
        if self.keep is not None:
            args.save_total_limit, self.keep = self.keep, None

    def at(self, step: int) -> RunRecord:
        """The record at `step`; every process calls it (the loss sum may be a collective)."""
        loss_sum = self.record.loss_sum if self.loss_sum is None else self.loss_sum()
        return dataclasses.replace(self.record, loss_sum=loss_sum, global_step=step)

    def on_save(self, args, state, control, **kwargs):
        record = self.at(state.global_step)
        if args.should_save:
            record.write(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            rotate_checkpoints(args.output_dir, self.keep, use_mtime=True)


def identity_changes(before: dict[str, Any], now: dict[str, Any]) -> dict[str, str]:
    """Each setting that differs, with `old -> new` in words."""
    return {
        key: f"{_shown(key, before.get(key))} -> {_shown(key, now.get(key))}"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    }


def _shown(key: str, value: Any) -> str:
    if key == "data" and isinstance(value, dict) and "rows" in value:
        return f"{value.get('rows')} rows sha256:{str(value.get('sha256'))[:12]}"
    if isinstance(value, dict) and "sha256" in value:
        return f"sha256:{str(value['sha256'])[:12]}"
    if key == "training_chat_template" and value:
        return f"sha256:{value[:12]}"
    return json.dumps(value)


def describe_changes(changed: dict[str, str]) -> str:
    return ", ".join(f"{key} ({change})" for key, change in changed.items())


def continue_run(checkpoint: str, current: RunRecord, *, accept_changes: bool) -> RunRecord:
    """This run's record when it resumes `checkpoint`: refused (`ResumeChangedError`) when the
    checkpoint was trained with other data or settings, or has no readable record to tell,
    unless `accept_changes`; then the checkpoint's configuration joins `earlier`, for the card."""
    recorded = RunRecord.read(checkpoint)
    if recorded is None:
        if not accept_changes:
            raise ResumeChangedError(
                f"{checkpoint}: its {RUN_RECORD} is missing or damaged, so nothing tells what it was "
                "trained with; pass --resume_with_changes true to continue it with these settings "
                "anyway, or --fresh true to start over"
            )
        logger.warning("%s has no readable %s: resuming it with these settings", checkpoint, RUN_RECORD)
        return dataclasses.replace(current, loss_sum=logged_loss_sum(checkpoint))
    changed = identity_changes(recorded.identity, current.identity)
    if changed and not accept_changes:
        raise ResumeChangedError(
            f"{checkpoint}: was trained with other settings than this run: {describe_changes(changed)}; run "
            "with its settings, pass --resume_with_changes true to continue it with these (the model "
            "card records both), or --fresh true to start over"
        )
    earlier = list(recorded.earlier)
    if changed:
        logger.warning("resuming %s with changed settings: %s", checkpoint, describe_changes(changed))
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


def check_finished(output_dir: str | Path, current: RunRecord) -> RunRecord:
    """The record of the finished run in `output_dir`, refused when it was trained with other data
    or settings than this run (or its record cannot tell), so it is never reported as this run's."""
    recorded = RunRecord.read(output_dir)
    if recorded is None:
        raise ResumeChangedError(
            f"{output_dir}: holds a finished run whose {RUN_RECORD} is missing or damaged, so nothing "
            "tells what it was trained with; pass --fresh true to train again, or choose another --output_dir"
        )
    if changed := identity_changes(recorded.identity, current.identity):
        raise ResumeChangedError(
            f"{output_dir}: holds a finished run trained with other settings than this run: "
            f"{describe_changes(changed)}; pass --fresh true to train again with these, or choose another --output_dir"
        )
    return recorded


def logged_loss_sum(checkpoint: str | Path) -> float:
    """The per-step loss sum up to a checkpoint, from its logged losses (each log averages the
    steps since the previous one); steps after the last log count at the logged mean."""
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
        total += total / covered * (step - previous)
    return total
