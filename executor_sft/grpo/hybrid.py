"""Hybrid deep + wide batches (WideSeek-R1, App. D "Data Mixing": 64 deep and 64 wide of 128).

`hybrid_batches` fixes how many deep (text) and wide (table) questions every batch holds;
`HybridRepeatSampler` feeds it to TRL's GRPO loop in the shape TRL's own `RepeatSampler` has:
each chosen question `num_generations` times in a row, so a group stays one question.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from executor_sft.errors import ConfigError


def deep_count(batch_size: int, deep_share: float) -> int:
    """Deep questions in a batch of `batch_size` (rounded to the nearest whole question)."""
    if not 0.0 <= deep_share <= 1.0:
        raise ConfigError(f"deep_share must be in [0, 1], got {deep_share}")
    return int(round(batch_size * deep_share))


def hybrid_batches(
    is_wide: Sequence[bool], batch_size: int, deep_share: float, *, seed: int = 0, epoch: int = 0
) -> list[list[int]]:
    """One epoch of batches: each `deep_count` deep indices then the rest wide, shuffled per kind.

    The epoch has as many batches as the scarcer kind fills (a kind is never repeated within an
    epoch); a share that needs a kind the data lacks is a ConfigError."""
    n_deep = deep_count(batch_size, deep_share)
    n_wide = batch_size - n_deep
    deep = [i for i, w in enumerate(is_wide) if not w]
    wide = [i for i, w in enumerate(is_wide) if w]
    if (n_deep and not deep) or (n_wide and not wide):
        raise ConfigError(
            f"deep_share {deep_share} needs {n_deep} deep and {n_wide} wide questions a batch; "
            f"the data has {len(deep)} deep and {len(wide)} wide"
        )
    rng = random.Random(seed + epoch)
    rng.shuffle(deep)
    rng.shuffle(wide)
    counts = [len(deep) // n_deep if n_deep else None, len(wide) // n_wide if n_wide else None]
    n_batches = min(c for c in counts if c is not None)
    if n_batches == 0:
        raise ConfigError(
            f"a batch of {batch_size} needs {n_deep} deep and {n_wide} wide questions; the data has "
            f"{len(deep)} deep and {len(wide)} wide"
        )
    return [
        deep[b * n_deep : (b + 1) * n_deep] + wide[b * n_wide : (b + 1) * n_wide] for b in range(n_batches)
    ]


class HybridRepeatSampler:
    """Indices for TRL's dataloader: hybrid batches of `batch_size` questions, each question
    `num_generations` times in a row; a new shuffle every epoch. The Trainer names the epoch
    (`set_epoch`), so a run resumed in epoch N draws epoch N's batches, as the run it continues."""

    def __init__(
        self, is_wide: Sequence[bool], batch_size: int, num_generations: int, deep_share: float, seed: int = 0
    ):
        self.is_wide = list(is_wide)
        self.batch_size = batch_size
        self.num_generations = num_generations
        self.deep_share = deep_share
        self.seed = seed
        self.epoch = 0
        self._n = len(hybrid_batches(self.is_wide, batch_size, deep_share, seed=seed))

    def __len__(self) -> int:
        return self._n * self.batch_size * self.num_generations

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        batches = hybrid_batches(
            self.is_wide, self.batch_size, self.deep_share, seed=self.seed, epoch=self.epoch
        )
        self.epoch += 1
        for batch in batches:
            for index in batch:
                yield from [index] * self.num_generations
