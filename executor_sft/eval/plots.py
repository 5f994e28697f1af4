"""PNG plots (matplotlib, Agg backend: no display needed): Pareto, capacity and role curves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first


@dataclass(frozen=True)
class Point:
    label: str
    tokens: float
    """Sub-agent tokens per question (x; lower is better)."""
    accuracy: float
    """Accuracy in [0, 1] over every evaluated question (y; higher is better)."""
    backbone: str = ""
    executor: str = ""
    research_s: float | None = None
    """Research P50 in seconds (the latency x axis; None: not timed)."""


X_AXES = {"tokens": "sub-agent tokens per question", "research_s": "research phase P50 (s, log scale)"}
"""What a Pareto plot can put on its x axis (a `Point` attribute) and the axis label. Times span
orders of magnitude across search configurations (BM25 in ms, an LLM reranker in seconds), so
the time axis is logarithmic."""


def pareto_front(points: Sequence[Point], x: str = "tokens") -> list[Point]:
    """Points no other point beats on both axes (lower-or-equal x and higher-or-equal accuracy,
    one strictly), sorted by x; points without an x value are left out."""
    points = [p for p in points if getattr(p, x) is not None]
    front = []
    for p in points:
        px = getattr(p, x)
        dominated = any(
            getattr(q, x) <= px
            and q.accuracy >= p.accuracy
            and (getattr(q, x) < px or q.accuracy > p.accuracy)
            for q in points
        )
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: (getattr(p, x), -p.accuracy))


def point_labels(points: Sequence[Point], x: str = "tokens") -> list[tuple[float, float, str]]:
    """(x, accuracy %, label) once per position: points that coincide share one label,
    their names joined by " = ", so coincident cells do not print over each other."""
    at: dict[tuple[float, float], list[str]] = {}
    for p in points:
        at.setdefault((round(getattr(p, x), 6), round(100 * p.accuracy, 6)), []).append(p.label)
    return [(x, y, " = ".join(dict.fromkeys(labels))) for (x, y), labels in at.items()]


LABEL_WIDTH = 28
"""Characters per line of a point label; longer labels (coinciding cells) wrap."""


def wrap_label(label: str, width: int = LABEL_WIDTH) -> str:
    """A point label on lines of at most about `width` characters, breaking before each " = "."""
    lines: list[str] = []
    for part in label.split(" = "):
        part = part if not lines else "= " + part
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def percent_limits(values: Sequence[float], min_span: float = 20.0) -> tuple[float, float]:
    """A y range for percentages: the data padded, at least `min_span` wide, inside [0, 100]
    (a flat 100 gets 80-100, not 95-105)."""
    if not values:
        return 0.0, 100.0
    lo, hi = min(values), max(values)
    pad = max(0.08 * (hi - lo), 2.0)
    lo, hi = lo - pad, hi + pad
    if hi - lo < min_span:
        grow = (min_span - (hi - lo)) / 2
        lo, hi = lo - grow, hi + grow
    if lo < 0:
        lo, hi = 0.0, min(100.0, hi - lo)
    if hi > 100:
        lo, hi = max(0.0, lo - (hi - 100)), 100.0
    return lo, hi


def _percent_axis(ax, values: Sequence[float]) -> None:
    """`percent_limits` plus a margin of 3% of the range, so points on 0 or 100 sit clear of the
    frame; ticks stay inside [0, 100]."""
    lo, hi = percent_limits(values)
    margin = 0.03 * (hi - lo)
    ax.set_ylim(lo - margin, hi + margin)
    ax.set_yticks([t for t in ax.get_yticks() if lo - 1e-9 <= t <= hi + 1e-9])


def _label_offset(x: float, y: float, ax) -> dict:
    """Annotation placement that points a label into the axes: left of points in the right
    third, below points in the top tenth (fractions of the axes, so log axes place alike)."""
    fx, fy = ax.transAxes.inverted().transform(ax.transData.transform((x, y)))
    right, top = fx > 0.66, fy > 0.9
    return {
        "xytext": (-7 if right else 7, -7 if top else 5),
        "ha": "right" if right else "left",
        "va": "top" if top else "bottom",
    }


def pareto_figure(
    points: Sequence[Point], metric: str = "accuracy", title: str | None = None, x: str = "tokens"
):
    """The figure `plot_pareto` saves (a matplotlib Figure, laid out when drawn)."""
    if x not in X_AXES:
        raise ValueError(f"pareto x axis {x!r}: expected one of {sorted(X_AXES)}")
    points = [p for p in points if getattr(p, x) is not None]
    front = pareto_front(points, x)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110, layout="constrained")
    on_front = {id(p) for p in front}
    for p in points:
        marker, color = ("*", "tab:red") if id(p) in on_front else ("o", "tab:blue")
        ax.scatter(
            getattr(p, x),
            100 * p.accuracy,
            marker=marker,
            s=120 if marker == "*" else 45,
            color=color,
            zorder=3,
            clip_on=False,
        )
    if front:
        xs = [getattr(p, x) for p in front]
        ys = [100 * p.accuracy for p in front]
        ax.step(xs, ys, where="post", color="tab:red", linestyle="--", linewidth=1, label="Pareto frontier")
        ax.legend(loc="best", fontsize=8)
    if x == "research_s":
        ax.set_xscale("log")
    _percent_axis(ax, [100 * p.accuracy for p in points])
    ax.margins(x=0.08)
    ax.autoscale_view()
    for px, py, label in point_labels(points, x):
        ax.annotate(
            wrap_label(label), (px, py), textcoords="offset points", fontsize=8, **_label_offset(px, py, ax)
        )
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(title or f"{metric} vs {X_AXES[x]}", pad=8)
    ax.grid(alpha=0.3)
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_pareto(
    points: Sequence[Point],
    path: str | Path,
    metric: str = "accuracy",
    title: str | None = None,
    x: str = "tokens",
) -> Path:
    """Accuracy vs `x` (a key of `X_AXES`: sub-agent tokens or research time per question), with
    the Pareto frontier marked; points without an `x` value are left out."""
    return _save(pareto_figure(points, metric, title, x), path)


def capacity_figure(
    points: Sequence[Point],
    metric: str = "accuracy",
    backbones: Sequence[str] | None = None,
    executors: Sequence[str] | None = None,
):
    """The figure `plot_capacity` saves."""
    grid = [p for p in points if p.backbone and p.executor]
    backbones = list(backbones) if backbones else list(dict.fromkeys(p.backbone for p in grid))
    executors = list(executors) if executors else list(dict.fromkeys(p.executor for p in grid))
    value = {(p.backbone, p.executor): 100 * p.accuracy for p in grid}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110, sharey=True, layout="constrained")
    for ex in executors:
        xs = [i for i, b in enumerate(backbones) if (b, ex) in value]
        left.plot(
            xs, [value[(backbones[i], ex)] for i in xs], marker="o", label=f"executor {ex}", clip_on=False
        )
    for bb in backbones:
        xs = [i for i, e in enumerate(executors) if (bb, e) in value]
        right.plot(
            xs, [value[(bb, executors[i])] for i in xs], marker="s", label=f"backbone {bb}", clip_on=False
        )
    _percent_axis(left, list(value.values()))
    for ax, names, what in (
        (left, backbones, "backbone (executor fixed)"),
        (right, executors, "executor (backbone fixed)"),
    ):
        ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
        ax.set_xlim(-0.3, max(len(names) - 1, 0) + 0.3)
        ax.set_xlabel(what)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    left.set_ylabel(f"{metric} (%)")
    fig.suptitle(f"capacity: {metric} as one role's model varies")
    return fig


def plot_capacity(
    points: Sequence[Point],
    path: str | Path,
    metric: str = "accuracy",
    backbones: Sequence[str] | None = None,
    executors: Sequence[str] | None = None,
) -> Path:
    """Two panels: accuracy vs backbone (one line per fixed executor), and vs executor (one line
    per fixed backbone). Axis order is the given order (e.g. by model size)."""
    return _save(capacity_figure(points, metric, backbones, executors), path)


def curve_gain(values: Sequence[float | None]) -> float | None:
    """A curve's total gain: its last value minus its first (None values skipped)."""
    present = [v for v in values if v is not None]
    return present[-1] - present[0] if len(present) >= 2 else None


def _delta_arrow(ax, xs: list[int], ys: list[float], color: str, label: str) -> None:
    """An arrow from a curve's first to its last point, labelled with the gain."""
    if curve_gain(ys) is None:
        return
    x0, y0, x1, y1 = xs[0], ys[0], xs[-1], ys[-1]
    ax.annotate(
        "", xy=(x1 + 0.15, y1), xytext=(x1 + 0.15, y0), arrowprops={"arrowstyle": "->", "color": color}
    )
    ax.annotate(f"{label} = {y1 - y0:+.1f}", (x1 + 0.2, (y0 + y1) / 2), color=color, fontsize=8, va="center")
    ax.plot([x0, x1 + 0.15], [y0, y0], color=color, linestyle=":", linewidth=0.8)


def role_curves_figure(
    scale: Sequence[str],
    decomposition: Sequence[float | None],
    execution: Sequence[float | None],
    metric: str = "accuracy",
    title: str | None = None,
):
    """The figure `plot_role_curves` saves."""
    fig, ax = plt.subplots(figsize=(7.2, 4.4), dpi=110, layout="constrained")
    shown = []
    for k, (values, color, name, delta) in enumerate(
        (
            (decomposition, "tab:red", "scaling decomposition (backbone varied)", "Δ_D"),
            (execution, "tab:blue", "scaling execution (executor varied)", "Δ_E"),
        )
    ):
        xs = [i for i, v in enumerate(values) if v is not None]
        ys = [100 * values[i] for i in xs]
        shown += ys
        # NaN for a missing cell breaks the line there, so a gap never reads as a measured value.
        line = [100 * v if v is not None else float("nan") for v in values]
        ax.plot(range(len(values)), line, marker="o", color=color, label=name, clip_on=False)
        for i in (i for i, v in enumerate(values) if v is None):
            ax.text(
                i,
                0.03 + 0.22 * k,
                MISSING,
                transform=ax.get_xaxis_transform(),
                color=color,
                fontsize=8,
                ha="center",
            )
        _delta_arrow(ax, xs, ys, color, delta)
    _percent_axis(ax, shown)
    ax.set_xticks(range(len(scale)), list(scale), rotation=15, fontsize=8)
    ax.set_xlim(-0.3, len(scale) - 0.3 + 0.8)
    ax.set_xlabel("model in the varied role")
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(title or "capacity sensitivity of each role", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def plot_role_curves(
    scale: Sequence[str],
    decomposition: Sequence[float | None],
    execution: Sequence[float | None],
    path: str | Path,
    metric: str = "accuracy",
    title: str | None = None,
) -> Path:
    """One role varied at a time on a shared model axis: the decomposition curve (backbone varied,
    red) and the execution curve (executor varied, blue), each with an arrow for its total gain
    (Δ_D, Δ_E). Accuracies in [0, 1]; None marks a cell that has no result yet."""
    return _save(role_curves_figure(scale, decomposition, execution, metric, title), path)


MISSING = "n/a"
"""What a bar slot shows for a metric with no value (e.g. no judge verdicts), unlike a drawn 0."""


def _score_bars(ax, names: list[str], results) -> None:
    """EM/F1/judge bars per dataset, each labelled with its value; a 0 is a visible stub with
    "0", a missing value an empty slot marked `MISSING`."""
    width = 0.27
    for j, metric in enumerate(("em", "f1", "judge")):
        values = [getattr(results.datasets[n], metric) for n in names]
        xs = [i + (j - 1) * width for i in range(len(names))]
        heights = [100 * v.mean if v else 0.0 for v in values]
        label = metric.upper() if metric != "judge" else "judge"
        bars = ax.bar(xs, heights, width, label=label)
        color = bars.patches[0].get_facecolor() if bars.patches else None
        for x, h, v in zip(xs, heights, values, strict=True):
            if v is None:
                ax.text(x, 1, MISSING, ha="center", va="bottom", fontsize=8, rotation=90, color="0.4")
                continue
            if h < 0.5:  # a zero-height bar draws nothing: a stub on the axis instead
                ax.plot([x - width / 2, x + width / 2], [0, 0], color=color, linewidth=3, clip_on=False)
            ax.text(x, h + 1, f"{h:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(-3, 108)  # a 0 stub clear of the frame, room for the value labels above 100
    ax.set_yticks(range(0, 101, 20))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("answer accuracy per dataset")


def summary_figure(results):
    """The figure `plot_summary` saves."""
    names = list(results.datasets)
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110, layout="constrained")
    _score_bars(bars, names, results)
    bucket = results.settings.get("bucket_tokens", 10_000)
    drawn = False
    for n in names:
        curve = results.datasets[n].cer_curve
        if curve:
            xs = [bucket * (i + 1) for i in range(len(curve))]
            curves.step(xs, [100 * c for c in curve], where="post", marker=".", label=n, clip_on=False)
            drawn = True
    if drawn:
        curves.legend(fontsize=8, loc="best")
    else:
        curves.text(0.5, 0.5, "no gold passage ids", ha="center", va="center", transform=curves.transAxes)
    curves.set_xlabel("executor context tokens consumed")
    curves.set_ylabel("gold passages retrieved (%)")
    curves.set_ylim(-3, 103)  # a curve on 0 or 100 clear of the frame
    curves.set_yticks(range(0, 101, 20))
    curves.set_title("CER-C curve")
    curves.grid(alpha=0.3)
    fig.suptitle(results.name)
    return fig


def plot_summary(results, path: str | Path) -> Path:
    """One evaluation at a glance: per-dataset EM/F1/judge bars, and the CER-C curves.

    `results` is an `EvalResults` (not imported here to keep this module free of eval logic).
    """
    return _save(summary_figure(results), path)
