"""The two training strata and the per-run decision (DESIGN.md, "Filter strata").

`all_correct` is an ablation baseline beside them (naive distillation: every correct run), not
a paper stratum; with it selected, a correct student or teacher run is kept whatever its
number of searches.

A stratum function takes a run and the `EpisodeContext` of its episode and returns None when
the run belongs to the stratum, else the reason it does not. `classify_run` applies the
common checks in a fixed order and routes each run to at most one stratum, so every run gets
exactly one outcome: a stratum or one exclusion reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from executor_sft.filters.config import ALL_CORRECT, INFO_GAIN_MULTI_SEARCH, SINGLE_SEARCH, FilterConfig
from executor_sft.filters.predicates import (
    correctness_failure,
    is_correct,
    is_counterfactual,
    needs_correction,
)
from executor_sft.filters.records import EpisodeView, RunView


@dataclass
class EpisodeContext:
    """What deciding one run needs to know about the rest of its episode."""

    episode: EpisodeView
    config: FilterConfig
    covered: set[tuple[int, int]] = field(default_factory=set)
    """(round, sub_query_index) of sub-queries that some correct student run answers."""
    counterfactuals: dict[str, list[RunView]] = field(default_factory=dict)
    """run_id -> its budget-1 re-runs (role `budget1_role`, `counterfactual_of == run_id`)."""

    @classmethod
    def build(cls, episode: EpisodeView, config: FilterConfig) -> EpisodeContext:
        covered = set()
        cfs: dict[str, list[RunView]] = defaultdict(list)
        for run in episode.runs:
            if run.role == config.student_role and is_correct(run, config.require_judge, config.min_em):
                covered.add(run.sub_query_key)
            if run.role == config.budget1_role and run.counterfactual_of is not None:
                cfs[run.counterfactual_of].append(run)
        return cls(episode=episode, config=config, covered=covered, counterfactuals=dict(cfs))


@dataclass(frozen=True)
class Decision:
    """The outcome for one run: a stratum (kept) or an exclusion reason."""

    run: RunView
    stratum: str | None = None
    reason: str | None = None

    @property
    def kept(self) -> bool:
        return self.stratum is not None


def _correct_reason(run: RunView, cfg: FilterConfig) -> str | None:
    return correctness_failure(run, cfg.require_judge, cfg.min_em)


def single_search(run: RunView, ctx: EpisodeContext) -> str | None:
    """Student or teacher, exactly `single_searches` searches, correct; a teacher run only where
    no correct student run covers the sub-query (unless `teacher_single_search == "all"`)."""
    cfg = ctx.config
    if run.role not in (cfg.student_role, cfg.teacher_role):
        return "role_not_trained"
    if run.n_searches != cfg.single_searches:
        return "not_single_search"
    if reason := _correct_reason(run, cfg):
        return reason
    if (
        run.role == cfg.teacher_role
        and cfg.teacher_single_search == "uncovered"
        and run.sub_query_key in ctx.covered
    ):
        return "teacher_single_covered"
    return None


UNKNOWN_CORRECTNESS = frozenset({"no_outcome", "judge_null"})
"""Correctness failures that say nothing about the answer (never scored, or no verdict)."""


def info_gain_multi_search(run: RunView, ctx: EpisodeContext) -> str | None:
    """Teacher, >= `min_searches` searches, correct, and its budget-1 re-run exists and is known
    to fail: every re-run, if there are several, did not report, has EM < `min_em` or a False
    verdict. A re-run whose correctness is unknown (no outcome, or EM ok and no verdict) is not
    a failure: the run is excluded as `counterfactual_unjudged`."""
    cfg = ctx.config
    if run.role != cfg.teacher_role:
        return "student_multi_search" if run.role == cfg.student_role else "role_not_trained"
    if run.n_searches < cfg.min_searches:
        return "below_min_searches"
    if reason := _correct_reason(run, cfg):
        return reason
    cfs = ctx.counterfactuals.get(run.run_id)
    if not cfs:
        return "no_counterfactual"
    if any(is_correct(cf, cfg.require_judge, cfg.min_em) for cf in cfs):
        return "counterfactual_correct"
    if any(_correct_reason(cf, cfg) in UNKNOWN_CORRECTNESS for cf in cfs):
        return "counterfactual_unjudged"
    return None


def all_correct(run: RunView, ctx: EpisodeContext) -> str | None:
    """Ablation baseline (naive distillation): student or teacher, correct, any number of
    searches; no coverage or counterfactual rule."""
    cfg = ctx.config
    if run.role not in (cfg.student_role, cfg.teacher_role):
        return "role_not_trained"
    return _correct_reason(run, cfg)


def classify_run(run: RunView, ctx: EpisodeContext) -> Decision:
    """Decide one run. Check order (first failing check names the reason):
    counterfactual_role, role_not_trained, correctness (not_report, no_outcome, wrong_em,
    judge_null, judge_false), search count (no_search, below_single_searches, below_min_searches), stratum rule
    (teacher_single_covered, student_multi_search, no_counterfactual, counterfactual_correct,
    counterfactual_unjudged),
    stratum_disabled, corrected_turn. With `all_correct` selected, the search-count and
    stratum-rule checks are skipped."""
    cfg = ctx.config
    if is_counterfactual(run, cfg.budget1_role):
        return Decision(run, reason="counterfactual_role")
    if run.role not in (cfg.student_role, cfg.teacher_role):
        return Decision(run, reason="role_not_trained")
    if reason := _correct_reason(run, cfg):
        return Decision(run, reason=reason)
    if ALL_CORRECT in cfg.strata:
        stratum, reason = ALL_CORRECT, all_correct(run, ctx)
    elif run.n_searches == cfg.single_searches:
        stratum, reason = SINGLE_SEARCH, single_search(run, ctx)
    elif run.n_searches >= cfg.min_searches:
        stratum, reason = INFO_GAIN_MULTI_SEARCH, info_gain_multi_search(run, ctx)
    elif run.n_searches < cfg.single_searches:
        return Decision(run, reason="no_search" if run.n_searches == 0 else "below_single_searches")
    else:
        return Decision(run, reason="below_min_searches")
    if reason:
        return Decision(run, reason=reason)
    if stratum not in cfg.strata:
        return Decision(run, reason="stratum_disabled")
    if cfg.exclude_corrected and needs_correction(run):
        return Decision(run, reason="corrected_turn")
    return Decision(run, stratum=stratum)


def classify_episode(episode: EpisodeView, config: FilterConfig) -> list[Decision]:
    """Decisions for every run of one episode, in run order."""
    ctx = EpisodeContext.build(episode, config)
    return [classify_run(run, ctx) for run in episode.runs]
