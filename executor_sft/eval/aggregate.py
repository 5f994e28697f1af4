"""Aggregate scored episodes into per-dataset results (mean@k with run-to-run std).

Conventions (each a documented choice, see docs/eval.md):
- A score is averaged over a question's k samples, then over questions (`mean_at_k`);
  `std` is over sample indices.
- `average` ("avg") weights each dataset by the questions that scored it, i.e. it is the mean
  over every evaluated question, the paper's "Avg."; `macro` is the plain mean over datasets.
- The LLM judge averages over the episodes that have a verdict (`n` says how many); a
  group without any verdict reports None, not 0. `judge_em_disagreement` is the share of
  those episodes whose verdict differs from EM: above one half, the judge is not measuring
  answer quality (the tables flag it).
- Sub-agent tokens and searches count the system's own executor runs (the driver role;
  counterfactual re-runs excluded); for the single-agent baseline that is its one agent.
- "No sub-query" episodes are those where the backbone dispatched nothing (no system run).
  Their share is reported; they are scored like any other episode (the evaluation set, built
  once by `executor_sft.eval.eval_set`, decides which questions are scored at all).
- EM, cover-EM and F1 are rescored from each episode's answer when `normalization` is given
  (evaluations always give it); otherwise EM/F1 are the episode's stored values.
- CER-C is averaged over the episodes whose question lists gold passage ids. The
  answer-bearing variant (`cer_c_answer`, a proxy that needs no gold passages: see
  `metrics.cer.answer_bearing_cer_c`) is scored when the passages' texts are given
  (`passages=`), over the episodes whose question has a gold answer.
- Latency: T_search P50/P95 over every timed search call of the system's runs, research P50
  over the episodes' research-phase times (`metrics.latency`), in seconds. Percentiles do not
  average, so `average` and `macro` hold the pooled group's values.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from executor_sft.errors import InputError
from executor_sft.files import write_json
from executor_sft.metrics.aggregate import mean_at_k, weighted_mean
from executor_sft.metrics.answer import Normalization, cover_exact_match, exact_match, f1_score
from executor_sft.metrics.cer import answer_bearing_cer_c, episode_cer_c
from executor_sft.metrics.latency import percentile, research_times, search_latencies
from executor_sft.metrics.table import ColumnRule, table_scores
from executor_sft.metrics.tokens import search_histogram, subagent_tokens, system_runs
from executor_sft.schema import Episode
from executor_sft.store import read_episodes

AVG = "avg"
MACRO = "macro"
ANSWER_BEARING_NOTE = (
    "CER-C (answer-bearing) is a proxy: a retrieved passage counts as evidence when it contains "
    "a normalised gold answer alias; its curve is whether one was retrieved by each bucket"
)


@dataclass(frozen=True)
class Stat:
    """mean@k of one metric over one group of questions."""

    mean: float
    std: float
    k: int
    n: int
    """Questions that contributed (for the judge: questions with at least one verdict)."""


@dataclass
class GroupResult:
    name: str
    n_questions: int
    n_episodes: int
    em: Stat | None
    f1: Stat | None
    judge: Stat | None
    subagent_tokens: Stat | None
    searches: dict[str, Any]
    cer_c: Stat | None
    cer_curve: list[float] | None
    no_subquery_share: float
    error_share: float
    cover_em: Stat | None = None
    judge_em_disagreement: float | None = None
    """Share of the judged episodes whose verdict differs from EM (None: no verdicts)."""
    judged_episodes: int = 0
    cer_c_answer: Stat | None = None
    """CER-C, answer-bearing proxy (`metrics.cer.answer_bearing_cer_c`); None without passage texts."""
    t_search_p50: float | None = None
    t_search_p95: float | None = None
    research_p50: float | None = None
    """Seconds (see the module docstring); None when no record carries timings."""


@dataclass
class EvalResults:
    name: str
    datasets: dict[str, GroupResult]
    average: dict[str, float | None]
    """Each metric's mean over every evaluated question: per-dataset means weighted by the
    questions that scored them (the paper's "Avg.")."""
    pooled: GroupResult
    settings: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    macro: dict[str, float | None] = field(default_factory=dict)
    """The plain (unweighted) mean over datasets of each metric's mean."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResults:
        known = {f.name for f in fields(GroupResult)}

        def group(g: dict[str, Any]) -> GroupResult:
            stats = {k: Stat(**v) if isinstance(v, dict) else None for k, v in g.items() if k in _STAT_FIELDS}
            return GroupResult(**{k: v for k, v in {**g, **stats}.items() if k in known})

        return cls(
            name=data["name"],
            datasets={k: group(v) for k, v in data["datasets"].items()},
            average=data["average"],
            pooled=group(data["pooled"]),
            settings=data.get("settings", {}),
            meta=data.get("meta", {}),
            macro=data.get("macro", {}),
        )

    def save_json(self, path: str | Path) -> Path:
        path = Path(path)
        write_json(path, self.to_dict())
        return path

    @classmethod
    def load_json(cls, path: str | Path) -> EvalResults:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def metric(self, name: str, *, macro: bool = False) -> float | None:
        """A metric's average over every evaluated question (e.g. "judge", "em", "subagent_tokens");
        `macro=True`: the plain mean over datasets instead."""
        return (self.macro if macro else self.average).get(name)


_STAT_FIELDS = ("em", "cover_em", "f1", "judge", "subagent_tokens", "cer_c", "cer_c_answer")
AVERAGED = (*_STAT_FIELDS, "search_1", "search_2plus", "no_subquery_share")
LATENCY = ("t_search_p50", "t_search_p95", "research_p50")
"""Percentile fields: pooled over every episode, never averaged over groups."""

PassageText = Callable[[str], str | None]


def has_subquery(episode: Episode) -> bool:
    """Whether the system dispatched at least one executor run for this episode."""
    return bool(system_runs(episode))


def _stat(triples: list[tuple[str, int, float]]) -> Stat | None:
    if not triples:
        return None
    m = mean_at_k(triples)
    return Stat(mean=m.mean, std=m.std, k=m.k, n=m.n_questions)


def _table_triples(episode: Episode, key: tuple[str, int], normalization: Normalization):
    """EM, F1 and cover-EM of a table question: success, item F1, success."""
    # Table cells follow WideSearch's own normalisation whatever the text normalisation
    # (executor_sft/metrics/table.py); `normalization` applies to text questions only. Cells an
    # LLM judged were scored when the episode ran (`score_answer`): their recorded scores stand.
    rules = getattr(episode.question, "column_rules", None) or {}
    recorded = episode.metrics
    if recorded.success is not None and any(
        ColumnRule.from_dict(r).metric == "llm_judge" for r in rules.values()
    ):
        return (*key, recorded.success), (*key, recorded.item_f1), (*key, recorded.success)
    table = table_scores(
        episode.answer,
        episode.question.golden_answers[0],
        episode.question.unique_columns or [],
        rules=getattr(episode.question, "column_rules", None),
    )
    return (*key, table.success), (*key, table.item_f1), (*key, table.success)


def summarize_group(
    name: str,
    episodes: Sequence[Episode],
    *,
    normalization: Normalization | None = None,
    bucket_tokens: int = 10_000,
    n_buckets: int = 10,
    tokenizer: Any | None = None,
    passages: PassageText | None = None,
    cer_tokens: str = "calls",
) -> GroupResult:
    """Score one group (a dataset, or everything pooled)."""
    no_sub = [e for e in episodes if not has_subquery(e)]
    em, cover, f1, judge, tokens, cer = [], [], [], [], [], []
    disagree = 0
    curves: list[list[float]] = []
    runs = []
    for e in episodes:
        key = (e.question.id, e.sample_index)
        gold = e.question.golden_answers
        if normalization is None:
            em.append((*key, e.metrics.em))
            f1.append((*key, e.metrics.f1))
        else:
            em.append((*key, exact_match(e.answer, gold, normalization)))
            f1.append((*key, f1_score(e.answer, gold, normalization)))
        cover.append((*key, cover_exact_match(e.answer, gold, normalization or "squad")))
        if e.question.unique_columns:  # a table question is scored by its cells (docs/wide.md)
            em[-1], f1[-1], cover[-1] = _table_triples(e, key, normalization or "squad")
        if e.metrics.judge is not None:
            judge.append((*key, float(e.metrics.judge)))
            disagree += bool(e.metrics.judge) != (em[-1][2] >= 1.0)
        tokens.append((*key, float(subagent_tokens(e, tokenizer=tokenizer))))
        runs.extend(system_runs(e))
        scored = episode_cer_c(e, bucket_tokens, n_buckets, token_count=cer_tokens)
        if scored is not None:
            curves.append(scored[0])
            cer.append((*key, scored[1]))
    curve = [statistics.fmean(col) for col in zip(*curves, strict=True)] if curves else None
    n = len(episodes) or 1
    searches = [t for e in episodes for t in search_latencies(e)]
    return GroupResult(
        name=name,
        n_questions=len({e.question.id for e in episodes}),
        n_episodes=len(episodes),
        em=_stat(em),
        cover_em=_stat(cover),
        f1=_stat(f1),
        judge=_stat(judge),
        subagent_tokens=_stat(tokens),
        searches=search_histogram(runs).as_dict(),
        cer_c=_stat(cer),
        cer_curve=curve,
        no_subquery_share=len(no_sub) / n,
        error_share=sum(e.stop_reason == "error" for e in episodes) / n,
        judge_em_disagreement=disagree / len(judge) if judge else None,
        judged_episodes=len(judge),
        cer_c_answer=_answer_bearing(episodes, passages, normalization, bucket_tokens, n_buckets, cer_tokens),
        t_search_p50=percentile(searches, 50),
        t_search_p95=percentile(searches, 95),
        research_p50=percentile(research_times(episodes), 50),
    )


def _answer_bearing(
    episodes: Sequence[Episode],
    passages: PassageText | None,
    normalization: Normalization | None,
    bucket_tokens: int,
    n_buckets: int,
    cer_tokens: str = "calls",
) -> Stat | None:
    if passages is None:
        return None
    scores = []
    for e in episodes:
        scored = answer_bearing_cer_c(
            e,
            passages,
            bucket_tokens,
            n_buckets,
            normalization=normalization or "squad",
            token_count=cer_tokens,
        )
        if scored is not None:
            scores.append((e.question.id, e.sample_index, scored[1]))
    return _stat(scores)


def _flat(group: GroupResult) -> dict[str, float | None]:
    out: dict[str, float | None] = {
        k: (getattr(group, k).mean if getattr(group, k) else None) for k in _STAT_FIELDS
    }
    fractions = group.searches.get("fractions", {})
    has_runs = group.searches.get("invocations", 0) > 0
    out["search_1"] = fractions.get("1") if has_runs else None
    out["search_2plus"] = fractions.get(">=2") if has_runs else None
    out["no_subquery_share"] = group.no_subquery_share
    return out


def macro_average(groups: Iterable[GroupResult]) -> dict[str, float | None]:
    """The plain mean over groups of each metric (every dataset counts the same)."""
    flats = [_flat(g) for g in groups]
    out: dict[str, float | None] = {}
    for key in AVERAGED:
        values = [f[key] for f in flats if f[key] is not None]
        out[key] = statistics.fmean(values) if values else None
    return out


def _weight(group: GroupResult, key: str) -> int:
    """Questions behind a group's value of `key` (a judge mean counts only judged questions)."""
    stat = getattr(group, key, None) if key in _STAT_FIELDS else None
    return stat.n if isinstance(stat, Stat) else group.n_questions


def weighted_average(groups: Iterable[GroupResult]) -> dict[str, float | None]:
    """Each metric over every question: group means weighted by their question counts."""
    groups = list(groups)
    flats = [_flat(g) for g in groups]
    return {
        key: weighted_mean([f[key] for f in flats], [_weight(g, key) for g in groups]) for key in AVERAGED
    }


def summarize(
    episodes: Iterable[Episode | dict[str, Any]],
    name: str = "eval",
    *,
    normalization: Normalization | None = None,
    bucket_tokens: int = 10_000,
    n_buckets: int = 10,
    tokenizer: Any | None = None,
    meta: dict[str, Any] | None = None,
    passages: PassageText | None = None,
    cer_tokens: str = "calls",
) -> EvalResults:
    """Per-dataset results, their question-weighted and macro averages, and the pooled group.

    `passages(doc_id)` (a retrieved passage's text) turns on the answer-bearing CER-C."""
    eps = [e if isinstance(e, Episode) else Episode.model_validate(e) for e in episodes]
    by_dataset: dict[str, list[Episode]] = defaultdict(list)
    for e in eps:
        by_dataset[e.question.dataset].append(e)
    opts = {
        "normalization": normalization,
        "bucket_tokens": bucket_tokens,
        "n_buckets": n_buckets,
        "tokenizer": tokenizer,
        "passages": passages,
        "cer_tokens": cer_tokens,
    }
    datasets = {name_: summarize_group(name_, group, **opts) for name_, group in sorted(by_dataset.items())}
    settings = {k: v for k, v in opts.items() if k not in ("tokenizer", "passages")}
    if passages is not None:
        settings["cer_c_answer"] = ANSWER_BEARING_NOTE
    pooled = summarize_group("pooled", eps, **opts)
    pooled_latency = {key: getattr(pooled, key) for key in LATENCY}
    return EvalResults(
        name=name,
        datasets=datasets,
        average={**weighted_average(datasets.values()), **pooled_latency},
        pooled=pooled,
        settings=settings,
        meta=dict(meta or {}),
        macro={**macro_average(datasets.values()), **pooled_latency},
    )


def summarize_file(path: str | Path, name: str | None = None, **kwargs: Any) -> EvalResults:
    """`summarize` over an episodes JSONL file (a partial last line from a killed writer is skipped)."""
    path = Path(path)
    episodes = []
    for i, data in _numbered(path):
        try:
            episodes.append(Episode.model_validate(data))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise InputError(f"{path}:{i}: field '{where}': {err['msg']} (not an episode record)") from None
    return summarize(episodes, name or path.parent.name, **kwargs)


def _numbered(path: Path):
    """(line number, record) pairs, so errors can name the line (blank lines counted)."""
    with path.open(encoding="utf-8") as fh:
        lines = sum(1 for _ in fh)
    records = list(read_episodes(path))
    if len(records) == lines:
        return list(enumerate(records, start=1))
    # Blank lines or a skipped partial tail: recover the true line numbers.
    numbers = []
    with path.open(encoding="utf-8") as fh:
        numbers = [n for n, line in enumerate(fh, start=1) if line.strip()]
    return list(zip(numbers, records, strict=False))
