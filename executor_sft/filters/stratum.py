"""What a training stratum is, and `STRATA`: the registry `FilterConfig.strata` names.

A `Stratum` declares which runs it claims and the rule a claimed run must pass. The built-ins
(`executor_sft.filters.strata`) register here the same way a user's stratum does; a config may
also name a user's stratum by its import path `package.module:attr`, with no registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from executor_sft.registry import Registry
from executor_sft.schema import ExecutorRun

SINGLE_SEARCH = "single_search"
INFO_GAIN_MULTI_SEARCH = "info_gain_multi_search"
ALL_CORRECT = "all_correct"
DEFAULT_STRATA: tuple[str, ...] = (SINGLE_SEARCH, INFO_GAIN_MULTI_SEARCH)
"""The paper's strata (Sec. 3.4; the "uncovered" rule for teacher single-search runs is ours,
`FilterConfig.teacher_single`): selected by default, and consulted even when not selected, so a run of a
switched-off one is counted as `stratum_disabled` rather than by its search count."""


@dataclass(frozen=True)
class Stratum:
    """A kind of training row: the runs it claims and the rule a claimed run must pass.

    Both are asked only about runs that passed the common checks (a student or teacher run,
    not a budget-1 re-run, correct). A run several strata claim goes to the first selected one
    whose rule accepts it (selection order); if none accepts, the first claimant's reason counts.
    """

    claims: Callable[[ExecutorRun, Any], bool]
    """`(run, FilterConfig) -> bool`: the runs this stratum decides (the built-ins: by search count)."""
    rule: Callable[[ExecutorRun, Any], str | None]
    """`(run, EpisodeContext) -> None` when a claimed run belongs, else its exclusion reason."""
    alone: bool = False
    """It claims the runs of every other stratum (an ablation baseline): select it alone."""


STRATA: Registry[Stratum] = Registry("filter stratum")


def resolve_stratum(name: str) -> Stratum:
    """The registered stratum `name`, or the `Stratum` its import path names."""
    return STRATA.get_instance(name, Stratum, "executor_sft.filters.Stratum(claims=..., rule=...)")
