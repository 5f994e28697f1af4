"""The built-in strata and the per-run decision.

`single_search` and `info_gain_multi_search` are the paper's strata (Sec. 3.4; docs/filters.md,
"Rules"); within `single_search`, dropping a correct teacher run on a sub-query a correct student
run covers (`teacher_single: uncovered`, the default) is ours, where Sec. 3.4 keeps correct
single-search runs of either model (`teacher_single: all`, filter_paper.yaml); `all_correct` is an ablation baseline beside them (naive distillation: every correct
run, any number of searches). Each registers in `STRATA` as a `Stratum` (the runs it claims,
by search count, and its rule), as a user's stratum does.

`classify_run` applies the common checks in a fixed order and gives each run to at most one
stratum, so every run gets exactly one outcome: a stratum or one exclusion reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from executor_sft.filters import stratum
from executor_sft.filters.config import FilterConfig
from executor_sft.filters.predicates import is_counterfactual, needs_correction
from executor_sft.filters.stratum import STRATA, Stratum
from executor_sft.schema import Episode, ExecutorRun


def sub_query_key(run: ExecutorRun) -> tuple[int, int]:
    """(round, sub_query_index): with the episode id, the identity of a sub-query."""
    return (run.round, run.sub_query_index)


@dataclass
class EpisodeContext:
    """What deciding one run needs to know about the rest of its episode."""

    episode: Episode
    config: FilterConfig
    covered: set[tuple[int, int]] = field(default_factory=set)
    """(round, sub_query_index) of sub-queries that some correct student run answers."""
    counterfactuals: dict[str, list[ExecutorRun]] = field(default_factory=dict)
    """run_id -> its budget-1 re-runs (role `budget1_role`, `counterfactual_of == run_id`)."""
    routes: tuple[tuple[str, Stratum, bool], ...] = ()
    """(name, stratum, selected) in the order runs are offered to them: the selected strata,
    then the default ones not selected."""

    @classmethod
    def build(cls, episode: Episode, config: FilterConfig) -> EpisodeContext:
        covered = set()
        cfs: dict[str, list[ExecutorRun]] = defaultdict(list)
        for run in episode.runs:
            if run.role == config.student_role and run.is_correct(config.require_judge, config.min_em):
                covered.add(sub_query_key(run))
            if run.role == config.budget1_role and run.counterfactual_of is not None:
                cfs[run.counterfactual_of].append(run)
        routes = [(name, stratum.resolve_stratum(name), True) for name in config.strata]
        routes += [
            (name, stratum.resolve_stratum(name), False)
            for name in stratum.DEFAULT_STRATA
            if name not in config.strata
        ]
        return cls(
            episode=episode, config=config, covered=covered, counterfactuals=dict(cfs), routes=tuple(routes)
        )


@dataclass(frozen=True)
class Decision:
    """The outcome for one run: a stratum (kept) or an exclusion reason."""

    run: ExecutorRun
    stratum: str | None = None
    reason: str | None = None

    @property
    def kept(self) -> bool:
        return self.stratum is not None


def _correct_reason(run: ExecutorRun, cfg: FilterConfig) -> str | None:
    return run.correctness_failure(cfg.require_judge, cfg.min_em)


def single_search(run: ExecutorRun, ctx: EpisodeContext) -> str | None:
    """Student or teacher, exactly `single_searches` searches, correct (Sec. 3.4); with
    `teacher_single == "uncovered"` (ours) a teacher run only where no correct student run covers
    the sub-query; `"all"` (the paper's reading) keeps every such teacher run."""
    cfg = ctx.config
    if run.role not in (cfg.student_role, cfg.teacher_role):
        return "role_not_trained"
    if run.n_searches != cfg.single_searches:
        return "not_single_search"
    if reason := _correct_reason(run, cfg):
        return reason
    if (
        run.role == cfg.teacher_role
        and cfg.teacher_single == "uncovered"
        and sub_query_key(run) in ctx.covered
    ):
        return "teacher_single_covered"
    return None


UNKNOWN_CORRECTNESS = frozenset({"no_outcome", "judge_null"})
"""Correctness failures that say nothing about the answer (never scored, or no verdict)."""


def info_gain_multi_search(run: ExecutorRun, ctx: EpisodeContext) -> str | None:
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
    if any(cf.is_correct(cfg.require_judge, cfg.min_em) for cf in cfs):
        return "counterfactual_correct"
    if any(_correct_reason(cf, cfg) in UNKNOWN_CORRECTNESS for cf in cfs):
        return "counterfactual_unjudged"
    return None


def all_correct(run: ExecutorRun, ctx: EpisodeContext) -> str | None:
    """Ablation baseline (naive distillation): student or teacher, correct, any number of
    searches; no coverage or counterfactual rule."""
    cfg = ctx.config
    if run.role not in (cfg.student_role, cfg.teacher_role):
        return "role_not_trained"
    return _correct_reason(run, cfg)


STRATA.register(
    stratum.SINGLE_SEARCH,
    Stratum(claims=lambda run, cfg: run.n_searches == cfg.single_searches, rule=single_search),
)
STRATA.register(
    stratum.INFO_GAIN_MULTI_SEARCH,
    Stratum(claims=lambda run, cfg: run.n_searches >= cfg.min_searches, rule=info_gain_multi_search),
)
STRATA.register(stratum.ALL_CORRECT, Stratum(claims=lambda run, cfg: True, rule=all_correct, alone=True))


def _common_reason(run: ExecutorRun, cfg: FilterConfig) -> str | None:
    """The checks every stratum shares, before any is asked."""
    if is_counterfactual(run, cfg.budget1_role):
        return "counterfactual_role"
    if run.role not in (cfg.student_role, cfg.teacher_role):
        return "role_not_trained"
    return _correct_reason(run, cfg)


def _unclaimed_reason(run: ExecutorRun, cfg: FilterConfig) -> str:
    """Why no stratum claims a run: its search count is below every stratum's."""
    if run.n_searches < cfg.single_searches:
        return "no_search" if run.n_searches == 0 else "below_single_searches"
    return "below_min_searches"


def route(run: ExecutorRun, ctx: EpisodeContext) -> tuple[str | None, str | None]:
    """(stratum, None) for the stratum that takes the run, else (None, why not)."""
    first_reason = None
    for name, candidate, selected in ctx.routes:
        if not candidate.claims(run, ctx.config):
            continue
        reason = candidate.rule(run, ctx)
        if reason is None:
            return (name, None) if selected else (None, "stratum_disabled")
        first_reason = first_reason or reason
    return None, first_reason or _unclaimed_reason(run, ctx.config)


def classify_run(run: ExecutorRun, ctx: EpisodeContext) -> Decision:
    """Decide one run. Check order (first failing check names the reason):
    counterfactual_role, role_not_trained, correctness (not_report, no_outcome, wrong_em,
    judge_null, judge_false), the claiming stratum's rule (teacher_single_covered,
    student_multi_search, no_counterfactual, counterfactual_correct, counterfactual_unjudged, ...), stratum_disabled,
    the search count when no stratum claims the run (no_search, below_single_searches,
    below_min_searches), corrected_turn."""
    cfg = ctx.config
    if reason := _common_reason(run, cfg):
        return Decision(run, reason=reason)
    taken, reason = route(run, ctx)
    if reason:
        return Decision(run, reason=reason)
    if cfg.exclude_corrected and needs_correction(run):
        return Decision(run, reason="corrected_turn")
    return Decision(run, stratum=taken)


def classify_episode(episode: Episode, config: FilterConfig) -> list[Decision]:
    """Decisions for every run of one episode, in run order."""
    ctx = EpisodeContext.build(episode, config)
    return [classify_run(run, ctx) for run in episode.runs]
