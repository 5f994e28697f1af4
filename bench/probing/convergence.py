"""Training a demo student to convergence (issue #39): epochs, probe interval, fast path, plateau.

`ConvergenceConfig` is what `bench/demo_ablation.py --epochs ...` adds to a `DemoConfig`; the
demo's own training (`recipes/demo.py`, `max_steps`) does not use it. Under it, `train_demo`
trains `epochs` passes over the rows instead of `max_steps`, checkpoints every `probe_every`
steps (the last checkpoint only) and resumes from the last complete one, and the probe callback
(`probe_callback.ProbeCallback`) records the learning curve and applies the plateau rule.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bench.probing.callback import PlateauRule


class ConvergenceConfig(BaseModel):
    """The convergence mode's knobs (one value for every variant of an ablation)."""

    model_config = ConfigDict(extra="forbid")

    epochs: float = Field(3.0, gt=0)
    """Passes over the variant's training rows (num_train_epochs; max_steps is not used)."""
    probe_every: int = Field(8, ge=1)
    """Optimizer steps between probes, and between checkpoints."""
    gathered_loss: bool = True
    """The CPU fast path's exact loss (`SFTScriptArguments.gathered_loss`)."""
    trainable_layers: int | None = Field(None, ge=1)
    """Train only the top N decoder layers (None: all)."""
    heldout_rows: int = Field(16, ge=0)
    """The variant's rows kept out of training for the held-out loss (seeded; 0: none)."""
    plateau_patience: int = Field(3, ge=1)
    plateau_diff: float = Field(0.02, ge=0)
    plateau_loss: float = Field(0.01, ge=0)
    plateau_min_epochs: float = Field(1.0, ge=0)
    plateau: bool = True
    """Stop early by `plateau_rule()`; off: always the full `epochs`."""

    def plateau_rule(self) -> PlateauRule | None:
        if not self.plateau:
            return None
        return PlateauRule(
            patience=self.plateau_patience,
            diff_tol=self.plateau_diff,
            loss_tol=self.plateau_loss,
            min_epochs=self.plateau_min_epochs,
        )

    def training_overrides(self) -> dict[str, Any]:
        """SFTConfig fields for this mode (over `train_demo`'s)."""
        return {
            "max_steps": -1,
            "num_train_epochs": self.epochs,
            "save_strategy": "steps",
            "save_steps": self.probe_every,
            "save_total_limit": 1,
        }

    def script_overrides(self) -> dict[str, Any]:
        """SFTScriptArguments fields for this mode: resume, and the fast path."""
        return {
            "auto_resume": True,
            "gathered_loss": self.gathered_loss,
            "trainable_layers": self.trainable_layers,
        }


class EqualStepsConfig(ConvergenceConfig):
    """Every variant trains exactly `max_steps` optimizer steps on one schedule (cosine over
    `max_steps`), whatever its row count: variants differ only in their rows."""

    max_steps: int = Field(..., ge=1)
    plateau: bool = False

    def training_overrides(self) -> dict[str, Any]:
        return {**super().training_overrides(), "max_steps": self.max_steps}


def split_heldout(rows: list[dict], n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, `n` held-out rows): a seeded sample, both in the rows' order. At most half
    the rows are held out."""
    n = min(n, len(rows) // 2)
    held = set(random.Random(seed).sample(range(len(rows)), n))
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


__all__ = ["ConvergenceConfig", "EqualStepsConfig", "split_heldout"]
