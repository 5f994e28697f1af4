"""The difference of two shares with a 95% interval that respects repeated runs per item.

Why a cluster bootstrap: with mean@k sampling every sub-query is run k times, and its k runs
share the same passages, so they are not k independent draws. A Wald or Newcombe interval
over all runs would treat them as such and come out too narrow. Resampling whole sub-queries
(within each group, so both group sizes stay fixed) keeps that dependence; with one run per
sub-query it is the ordinary bootstrap of a difference of proportions. Percentile interval,
seeded, so the same runs give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShareDifference:
    """`diff` = share(a) - share(b) over all runs; `ci95` from resampling items."""

    diff: float
    ci95: tuple[float, float]
    n_items: tuple[int, int]
    n_runs: tuple[int, int]

    def to_dict(self) -> dict:
        return {
            "diff": self.diff,
            "ci95": list(self.ci95),
            "n_items": list(self.n_items),
            "n_runs": list(self.n_runs),
        }


def _share(groups: Sequence[Sequence[float]]) -> float:
    return sum(map(sum, groups)) / sum(map(len, groups))


def _resampled_shares(groups: Sequence[Sequence[float]], rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` bootstrap shares: items drawn with replacement, each with all of its runs."""
    hits = np.array([sum(g) for g in groups], dtype=float)
    runs = np.array([len(g) for g in groups], dtype=float)
    picks = rng.integers(0, len(groups), size=(n, len(groups)))
    return hits[picks].sum(axis=1) / runs[picks].sum(axis=1)


def share_difference(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> ShareDifference:
    """share(a) - share(b), where `a` and `b` hold one list of 0/1 outcomes per item (its runs)."""
    if not a or not b or any(len(g) == 0 for g in (*a, *b)):
        raise ValueError("share_difference: every group needs items, and every item at least one run")
    rng = np.random.default_rng(seed)
    boot = _resampled_shares(a, rng, resamples) - _resampled_shares(b, rng, resamples)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return ShareDifference(
        diff=_share(a) - _share(b),
        ci95=(float(lo), float(hi)),
        n_items=(len(a), len(b)),
        n_runs=(sum(map(len, a)), sum(map(len, b))),
    )


__all__ = ["ShareDifference", "share_difference"]
