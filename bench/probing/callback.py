"""The decision probe during training: a learning curve of P(search again), and a plateau stop.

`ProbeCallback` runs `probe.run_probe` every `every` optimizer steps and at the last step, on
held-out plain and ambiguous turn-2 prompts, with the model in eval mode under
`torch.inference_mode()` (train mode is restored after). Each probe appends one JSON line to
`path` (flushed at once): the step, the epoch, P(again | plain), P(again | ambiguous), their
difference with its 95% interval, the training loss the Trainer logged at that step (the mean
since its previous log: the callback makes the Trainer log at every probe step), the held-out
loss when held-out rows are given, and the per-prompt probabilities.

Resuming: at the start of training the records after the resumed step are dropped (they belong
to steps that will be trained again) and a step already recorded is never probed twice, so the
file holds one record per step whatever was killed where.

`PlateauRule` is the early stop; its docstring states the rule.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from bench.probing.probe import Turn2Prompt, run_probe
from executor_sft.sft.compile import eager_decoder_layers

PLATEAU, EPOCHS = "plateau", "epochs"
"""What stopped a run: the plateau rule, or the end of its epochs (or steps)."""


@dataclass(frozen=True)
class PlateauRule:
    """Stop when the probe's difference and the held-out loss stop moving.

    At a probe step, with at least `min_epochs` of training done and at least `patience` + 1
    probe records: over the last `patience` + 1 records, the difference (ambiguous - plain)
    ranges over at most `diff_tol` (absolute, probability units) AND the loss ranges over at most
    `loss_tol` times its latest value (relative). The loss is the held-out loss where the records
    have one, else the training loss. Both must hold: a flat difference with a falling loss is a
    model still learning, and a flat loss with a moving difference a decision still moving.
    """

    patience: int = 3
    diff_tol: float = 0.02
    loss_tol: float = 0.01
    min_epochs: float = 1.0

    def __post_init__(self):
        if self.patience < 1 or self.diff_tol < 0 or self.loss_tol < 0 or self.min_epochs < 0:
            raise ValueError(f"PlateauRule: patience >= 1 and non-negative tolerances, got {self}")

    def reached(self, records: Sequence[dict[str, Any]]) -> bool:
        if len(records) < self.patience + 1 or (records[-1].get("epoch") or 0.0) < self.min_epochs:
            return False
        window = records[-(self.patience + 1) :]
        diffs = [r["diff"] for r in window]
        key = "heldout_loss" if all(r.get("heldout_loss") is not None for r in window) else "loss"
        losses = [r.get(key) for r in window]
        if any(x is None or not math.isfinite(x) for x in losses):
            return False
        return max(diffs) - min(diffs) <= self.diff_tol and max(losses) - min(losses) <= self.loss_tol * abs(
            losses[-1]
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The probe records in `path` (none if it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def stopped_by(records: Sequence[dict[str, Any]]) -> str:
    """`plateau` if a record says the plateau rule stopped the run there, else `epochs`."""
    return PLATEAU if any(r.get("stop") == PLATEAU for r in records) else EPOCHS


def heldout_loss(model, examples: Sequence[dict[str, list[int]]]) -> float:
    """The mean loss per trained token of tokenised rows (`input_ids`, `labels`), no gradient;
    one forward pass per row (no padding), the model's own loss (not the gathered one)."""
    import torch

    device = next(model.parameters()).device
    total = count = 0.0
    with torch.inference_mode():
        for ex in examples:
            labels = torch.tensor([ex["labels"]], device=device)
            n = int((labels[:, 1:] != -100).sum())
            if n == 0:
                continue
            out = model(input_ids=torch.tensor([ex["input_ids"]], device=device), labels=labels)
            total += out.loss.float().item() * n
            count += n
    return total / count if count else float("nan")


class ProbeCallback(TrainerCallback):
    """Probe every `every` optimizer steps and at the last one; write records to `path`.

    `heldout_rows` (SFT rows kept out of training) are tokenised with the run's tokenizer and
    masks at the start of training, and their loss recorded at every probe. `plateau` (a
    `PlateauRule`) stops training at a probe step where it is reached; that record says
    `"stop": "plateau"`, and the Trainer saves a checkpoint there.
    """

    def __init__(
        self,
        prompts: Sequence[Turn2Prompt],
        path: str | Path,
        every: int,
        *,
        heldout_rows: Sequence[dict[str, Any]] = (),
        max_length: int | None = None,
        plateau: PlateauRule | None = None,
        seed: int = 0,
    ):
        if every < 1:
            raise ValueError(f"probe every {every} steps: give at least 1")
        self.prompts = list(prompts)
        self.path = Path(path)
        self.every = every
        self.heldout_rows = list(heldout_rows)
        self.max_length = max_length
        self.plateau = plateau
        self.seed = seed
        self.records: list[dict[str, Any]] = []
        self._heldout: list[dict[str, list[int]]] = []
        self._pending: int | None = None

    @property
    def stopped(self) -> str:
        return stopped_by(self.records)

    def on_train_begin(self, args, state, control, processing_class=None, **kwargs):
        records = read_records(self.path)
        kept = [r for r in records if r["step"] <= state.global_step]
        if len(kept) != len(records) or not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        self.records = kept
        if self.heldout_rows and processing_class is not None:
            from executor_sft.sft.train import prepare_dataset

            dataset, _ = prepare_dataset(
                self.heldout_rows, processing_class, self.max_length, disable_progress=True
            )
            self._heldout = [
                {"input_ids": x, "labels": y}
                for x, y in zip(dataset["input_ids"], dataset["labels"], strict=True)
            ]

    def _due(self, step: int, state) -> bool:
        done = self.records[-1]["step"] if self.records else -1
        return step > done and (step % self.every == 0 or step >= state.max_steps)

    def on_step_end(self, args, state, control, **kwargs):
        if self._due(state.global_step, state):
            self._pending = state.global_step
            control.should_log = True  # so the loss at this step is logged, and reaches on_log
        return control

    def on_log(self, args, state, control, logs=None, model=None, processing_class=None, **kwargs):
        if self._pending != state.global_step or "loss" not in (logs or {}):
            return control
        self._pending = None
        record = self._probe(state, model, processing_class, logs["loss"])
        if self.plateau is not None and self.plateau.reached(self.records):
            record["stop"] = PLATEAU
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        self._write(record)
        return control

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        last = self.records[-1]["step"] if self.records else 0
        if model is not None and state.global_step > last:
            loss = next((h["loss"] for h in reversed(state.log_history) if "loss" in h), None)
            self._write(self._probe(state, model, processing_class, loss))
        return control

    def _probe(self, state, model, tokenizer, loss: float | None) -> dict[str, Any]:
        t = time.perf_counter()
        with eager_decoder_layers(model):
            result = run_probe(model, tokenizer, self.prompts, seed=self.seed)
            record: dict[str, Any] = {"step": state.global_step, "epoch": state.epoch, "loss": loss}
            record.update(result.to_dict())
            if self._heldout:
                was_training = model.training
                model.eval()
                try:
                    record["heldout_loss"] = heldout_loss(model, self._heldout)
                finally:
                    model.train(was_training)
                record["heldout_rows"] = len(self._heldout)
        record["seconds"] = time.perf_counter() - t
        self.records.append(record)
        return record

    def _write(self, record: dict[str, Any]) -> None:
        # `record` is already the last of self.records; the file gets it appended and flushed.
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


__all__ = ["EPOCHS", "PLATEAU", "PlateauRule", "ProbeCallback", "heldout_loss", "read_records", "stopped_by"]
