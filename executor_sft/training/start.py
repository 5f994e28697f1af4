"""Where a training run starts, decided before any model loads, the same for every stage.

One writer per output folder (a second launch into it is refused in one line); the folder is
ours or refused (`training.output_dir`); a finished run trained with these data and settings is
reported, not retrained, and one trained with others is refused; else the explicit
`--resume_from_checkpoint` or the last complete checkpoint resumes, if its run record matches.
`--fresh` starts over: the earlier run's checkpoints in the folder are deleted first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor_sft.store_lock import WriterLock
from executor_sft.training.checkpoints import (
    check_resume_checkpoint,
    drop_checkpoints,
    finished_message,
    finished_run,
    last_complete_checkpoint,
)
from executor_sft.training.output_dir import claim_output_dir
from executor_sft.training.run_record import RunRecord, check_finished, continue_run

logger = logging.getLogger(__name__)


@dataclass
class RunStart:
    """This run's record (continuing the resumed checkpoint's), and a finished run's saved state or
    the checkpoint to resume. Holds the output folder's writer lock until `release` (or `with`)."""

    record: RunRecord
    finished: dict[str, Any] | None = None
    resume: str | None = None
    lock: WriterLock | None = None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> RunStart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def start_run(
    training_args: Any,
    record: RunRecord,
    *,
    fresh: bool = False,
    auto_resume: bool = True,
    accept_changes: bool = False,
) -> RunStart:
    """Claim `output_dir` for this run and decide where it starts (see the module docstring).

    Only the main process locks and marks the folder; every process makes the same decision."""
    out = Path(training_args.output_dir)
    main = training_args.process_index == 0
    claim_output_dir(out, main_process=main)  # first: a folder we cannot write gets its own line
    lock = WriterLock(out, advice="choose another --output_dir") if main else None
    try:
        return _decide(training_args, record, fresh, auto_resume, accept_changes, lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _decide(training_args, record, fresh, auto_resume, accept_changes, lock) -> RunStart:
    out = training_args.output_dir
    if not fresh and (done := finished_run(out, training_args.max_steps, training_args.num_train_epochs)):
        check_finished(out, record)
        if training_args.process_index == 0:
            print(finished_message(out, done))
        return RunStart(record, finished=done, lock=lock)
    if (
        fresh
        and not training_args.resume_from_checkpoint
        and training_args.process_index == 0
        and (dropped := drop_checkpoints(out))
    ):
        logger.warning("--fresh: deleted the earlier run's checkpoints %s", ", ".join(dropped))
    with_optimizer = not training_args.save_only_model
    resume = training_args.resume_from_checkpoint
    if resume:
        check_resume_checkpoint(resume, with_optimizer=with_optimizer)
    elif auto_resume and not fresh:
        resume = last_complete_checkpoint(out, with_optimizer=with_optimizer)
    if not resume:
        return RunStart(record, lock=lock)
    record = continue_run(resume, record, accept_changes=accept_changes)
    logger.warning("resuming from %s", resume)
    return RunStart(record, resume=resume, lock=lock)
