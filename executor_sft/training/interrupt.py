"""Ctrl-C or SIGTERM during training saves a checkpoint at the current step, then the run stops.

The first signal lets the step in progress finish; the Trainer then saves `checkpoint-N` (with
its run record) and stops, and the stage raises `TrainingInterrupted`, which the recipe turns into
one line saying where the run stands and exit status 130 (SIGINT) or 143 (SIGTERM). The final
model is not saved, so the relaunch sees an unfinished run and resumes from `checkpoint-N`. A
second signal acts at once, as it would without this (the checkpoints already saved stay).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from transformers import TrainerCallback

from executor_sft.errors import StoppedBySignal

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(StoppedBySignal):
    """The run stopped on a signal after saving a checkpoint at the step it had reached."""


class SaveOnInterrupt(TrainerCallback):
    """Turns the first SIGINT/SIGTERM during `trainer.train` into a checkpoint and a clean stop."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, Any] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if threading.current_thread() is threading.main_thread():
            self._before = {s: signal.signal(s, self._note) for s in SIGNALS}

    def _note(self, signum: int, frame: object) -> None:
        self.signum = signum
        self._restore()  # a second signal acts at once

    def on_step_end(self, args, state, control, **kwargs):
        if _any_process(self.signum is not None, args.device):
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before = {}

    def check(self, output_dir: str, global_step: int, max_steps: int) -> None:
        """Raise `TrainingInterrupted` if a signal stopped the run (after `train` returned)."""
        if self.signum is None:
            return
        name = signal.Signals(self.signum).name
        raise TrainingInterrupted(
            f"{name}: stopped at step {global_step} of {max_steps}; saved {output_dir}/checkpoint-{global_step}; "
            "run the same command again to resume from it",
            self.signum,
        )


def _any_process(flag: bool, device: Any) -> bool:
    """`flag` on any process of a distributed run (each may see the signal a step apart; all must
    stop at the same step, or the rest would wait in a collective)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
