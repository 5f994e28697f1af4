"""Markdown tables for one evaluation (rows = datasets) and for a sweep (rows = cells)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from executor_sft.eval.aggregate import ANSWER_BEARING_NOTE, AVG, MACRO, EvalResults, GroupResult, Stat

JUDGE_DISAGREEMENT_LIMIT = 0.5
"""Above this share of judged episodes where the judge's verdict differs from EM, a table flags the judge."""
FLAG = "†"


def judge_disagrees(group: GroupResult) -> bool:
    share = group.judge_em_disagreement
    return share is not None and share > JUDGE_DISAGREEMENT_LIMIT


def judge_warning(results: EvalResults) -> str | None:
    """One sentence when the judge disagrees with EM on most judged episodes, else None."""
    pooled = results.pooled
    if not judge_disagrees(pooled):
        return None
    return (
        f"{FLAG} the judge disagrees with EM on {100 * pooled.judge_em_disagreement:.0f}% of the "
        f"{pooled.judged_episodes} judged episodes: its score is not a measure of answer quality "
        'here; use a stronger judge model (docs/eval.md, "LLM judge")'
    )


def _pct(stat: Stat | None, with_std: bool = True) -> str:
    if stat is None:
        return "–"
    text = f"{100 * stat.mean:.1f}"
    return f"{text} ± {100 * stat.std:.1f}" if with_std and stat.k > 1 else text


def _num(value: float | None, pct: bool = True, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.{digits}f}" if pct else f"{value:,.0f}"


def _seconds(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "–"
    if unit == "ms":
        return f"{1000 * value:,.0f}"
    return f"{value:.2f}" if value < 1 else f"{value:,.1f}"


def _latency(values: GroupResult | dict[str, float | None]) -> list[str]:
    get = values.get if isinstance(values, dict) else lambda key: getattr(values, key)
    return [
        _seconds(get("t_search_p50"), "ms"),
        _seconds(get("t_search_p95"), "ms"),
        _seconds(get("research_p50")),
    ]


def _row(name: str, g: GroupResult) -> list[str]:
    s = g.searches
    has_runs = s.get("invocations", 0) > 0
    fr = s.get("fractions", {})
    return [
        name,
        str(g.n_questions),
        str(g.em.k if g.em else 0),
        _pct(g.em),
        _pct(g.cover_em),
        _pct(g.f1),
        _pct(g.judge)
        + (f" (n={g.judge.n})" if g.judge and g.judge.n < g.n_questions else "")
        + (f" {FLAG}" if judge_disagrees(g) else ""),
        _num(g.subagent_tokens.mean if g.subagent_tokens else None, pct=False),
        _num(fr.get("1"), digits=0) if has_runs else "–",
        _num(fr.get(">=2"), digits=0) if has_runs else "–",
        _pct(g.cer_c, with_std=False),
        _pct(g.cer_c_answer, with_std=False),
        _num(g.no_subquery_share, digits=0),
        *_latency(g),
    ]


LATENCY_HEADER = ["T_search P50 ms", "T_search P95 ms", "research P50 s"]

HEADER = [
    "dataset",
    "questions",
    "k",
    "EM",
    "cover-EM",
    "F1",
    "judge",
    "sub-agent tokens/q",
    "1 search %",
    "≥2 searches %",
    "CER-C",
    "CER-C (answer-bearing)",
    "no sub-query %",
    *LATENCY_HEADER,
]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _average_row(label: str, n: str, a: dict[str, float | None]) -> list[str]:
    return [
        label,
        n,
        "",
        _num(a.get("em")),
        _num(a.get("cover_em")),
        _num(a.get("f1")),
        _num(a.get("judge")),
        _num(a.get("subagent_tokens"), pct=False),
        _num(a.get("search_1"), digits=0),
        _num(a.get("search_2plus"), digits=0),
        _num(a.get("cer_c")),
        _num(a.get("cer_c_answer")),
        _num(a.get("no_subquery_share"), digits=0),
        *_latency(a),
    ]


def latency_note(meta: dict) -> str:
    """Where the times were measured: episodes in flight share the machine, models and retriever."""
    n = meta.get("concurrency")
    where = f"with up to {n} episodes in flight" if n else "as the run went"
    return (
        f"times are wall-clock, measured {where} (a search waits behind the calls of concurrent "
        "episodes; research = backbone rounds and executors up to the answerer)"
    )


def results_markdown(results: EvalResults) -> str:
    """Per-dataset rows, the question-weighted average (the paper's "Avg.") and the macro mean;
    scores in %, mean ± std over samples when k > 1."""
    rows = [_row(name, g) for name, g in results.datasets.items()]
    total = str(sum(g.n_questions for g in results.datasets.values()))
    rows.append(_average_row(f"**{AVG}** (weighted by questions)", total, results.average))
    if results.macro:
        rows.append(_average_row(f"{MACRO} (mean over datasets)", total, results.macro))
    notes = []
    eval_set = results.meta.get("eval_set")
    if eval_set:
        notes.append(f"evaluation set {eval_set}")
    if results.settings.get("normalization"):
        notes.append(f"answers normalised as {results.settings['normalization']}")
    bt, nb = results.settings.get("bucket_tokens"), results.settings.get("n_buckets")
    if bt and nb:
        notes.append(f"CER-C over {nb} buckets of {bt:,} context tokens")
    if results.settings.get("cer_c_answer"):
        notes.append(ANSWER_BEARING_NOTE)
    if results.pooled.t_search_p50 is not None or results.pooled.research_p50 is not None:
        notes.append(latency_note(results.meta))
    warning = judge_warning(results)
    title = f"### {results.name}\n\n"
    text = title + _table(HEADER, rows) + ("\n\n" + "; ".join(notes) + "." if notes else "")
    return text + (f"\n\n{warning}." if warning else "") + "\n"


SWEEP_HEADER = [
    "cell",
    "backbone",
    "executor",
    "EM",
    "cover-EM",
    "F1",
    "judge",
    "sub-agent tokens/q",
    "≥2 searches %",
    "CER-C",
    "CER-C (answer-bearing)",
    *LATENCY_HEADER,
]


METRIC_LABELS = {"em": "EM", "cover_em": "cover-EM", "f1": "F1", "judge": "judge"}


def sweep_markdown(
    cells: Sequence[tuple[str, str, str, EvalResults]],
    datasets: Sequence[str] | None = None,
    metric: str = "em",
) -> str:
    """One row per (name, backbone, executor, results): averages over every question (the paper's
    "Avg."), then `metric` (em, cover_em, f1 or judge) per dataset."""
    datasets = list(datasets) if datasets is not None else sorted({d for *_, r in cells for d in r.datasets})
    header = SWEEP_HEADER + [f"{METRIC_LABELS[metric]} {d}" for d in datasets]
    rows = []
    for name, backbone, executor, r in cells:
        a = r.average
        row = [
            name,
            backbone,
            executor,
            _num(a.get("em")),
            _num(a.get("cover_em")),
            _num(a.get("f1")),
            _num(a.get("judge")) + (f" {FLAG}" if judge_disagrees(r.pooled) else ""),
            _num(a.get("subagent_tokens"), pct=False),
            _num(a.get("search_2plus"), digits=0),
            _num(a.get("cer_c")),
            _num(a.get("cer_c_answer")),
            *_latency(a),
        ]
        row += [_pct(getattr(r.datasets[d], metric)) if d in r.datasets else "–" for d in datasets]
        rows.append(row)
    notes = []
    if any(r.settings.get("cer_c_answer") for *_, r in cells):
        notes.append(ANSWER_BEARING_NOTE)
    timed = [r for *_, r in cells if r.average.get("t_search_p50") is not None]
    if timed:
        notes.append(latency_note(timed[0].meta))
    flagged = [name for name, _, _, r in cells if judge_disagrees(r.pooled)]
    note = (
        f"\n\n{FLAG} the judge disagrees with EM on more than half of the judged episodes of "
        f'{", ".join(flagged)}: that judge score is not a measure of answer quality (docs/eval.md, "LLM judge").'
        if flagged
        else ""
    )
    return _table(header, rows) + ("\n\n" + "; ".join(notes) + "." if notes else "") + note + "\n"


def write_markdown(text: str, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
