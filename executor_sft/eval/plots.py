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


def plot_pareto(
    points: Sequence[Point],
    path: str | Path,
    metric: str = "accuracy",
    title: str | None = None,
    x: str = "tokens",
) -> Path:
    """Accuracy vs `x` (a key of `X_AXES`: sub-agent tokens or research time per question), with
    the Pareto frontier marked; points without an `x` value are left out."""
    if x not in X_AXES:
        raise ValueError(f"pareto x axis {x!r}: expected one of {sorted(X_AXES)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    points = [p for p in points if getattr(p, x) is not None]
    front = pareto_front(points, x)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
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
        )
    for px, py, label in point_labels(points, x):
        ax.annotate(label, (px, py), textcoords="offset points", xytext=(5, 4), fontsize=8)
    if front:
        xs = [getattr(p, x) for p in front]
        ys = [100 * p.accuracy for p in front]
        ax.step(xs, ys, where="post", color="tab:red", linestyle="--", linewidth=1, label="Pareto frontier")
        ax.legend(loc="lower right", fontsize=8)
    if x == "research_s":
        ax.set_xscale("log")
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(title or f"{metric} vs {X_AXES[x]}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_capacity(
    points: Sequence[Point],
    path: str | Path,
    metric: str = "accuracy",
    backbones: Sequence[str] | None = None,
    executors: Sequence[str] | None = None,
) -> Path:
    """Two panels: accuracy vs backbone (one line per fixed executor), and vs executor (one line
    per fixed backbone). Axis order is the given order (e.g. by model size)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    grid = [p for p in points if p.backbone and p.executor]
    backbones = list(backbones) if backbones else list(dict.fromkeys(p.backbone for p in grid))
    executors = list(executors) if executors else list(dict.fromkeys(p.executor for p in grid))
    value = {(p.backbone, p.executor): 100 * p.accuracy for p in grid}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110, sharey=True)
    for ex in executors:
        xs = [i for i, b in enumerate(backbones) if (b, ex) in value]
        left.plot(xs, [value[(backbones[i], ex)] for i in xs], marker="o", label=f"executor {ex}")
    for bb in backbones:
        xs = [i for i, e in enumerate(executors) if (bb, e) in value]
        right.plot(xs, [value[(bb, executors[i])] for i in xs], marker="s", label=f"backbone {bb}")
    for ax, names, what in (
        (left, backbones, "backbone (executor fixed)"),
        (right, executors, "executor (backbone fixed)"),
    ):
        ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
        ax.set_xlabel(what)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    left.set_ylabel(f"{metric} (%)")
    fig.suptitle(f"capacity: {metric} as one role's model varies")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.2, 4.4), dpi=110)
    for values, color, name, delta in (
        (decomposition, "tab:red", "scaling decomposition (backbone varied)", "Δ_D"),
        (execution, "tab:blue", "scaling execution (executor varied)", "Δ_E"),
    ):
        xs = [i for i, v in enumerate(values) if v is not None]
        ys = [100 * values[i] for i in xs]
        ax.plot(xs, ys, marker="o", color=color, label=name)
        _delta_arrow(ax, xs, ys, color, delta)
    ax.set_xticks(range(len(scale)), list(scale), rotation=15, fontsize=8)
    ax.set_xlim(-0.3, len(scale) - 0.3 + 0.8)
    ax.set_xlabel("model in the varied role")
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(title or "capacity sensitivity of each role", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_summary(results, path: str | Path) -> Path:
    """One evaluation at a glance: per-dataset EM/F1/judge bars, and the CER-C curves.

    `results` is an `EvalResults` (not imported here to keep this module free of eval logic).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(results.datasets)
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    width = 0.27
    for j, metric in enumerate(("em", "f1", "judge")):
        values = [getattr(results.datasets[n], metric) for n in names]
        xs = [i + (j - 1) * width for i in range(len(names))]
        bars.bar(
            xs,
            [100 * v.mean if v else 0.0 for v in values],
            width,
            label=metric.upper() if metric != "judge" else "judge",
        )
    bars.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    bars.set_ylabel("score (%)")
    bars.set_ylim(0, 100)
    bars.legend(fontsize=8)
    bars.set_title("answer accuracy per dataset")
    bucket = results.settings.get("bucket_tokens", 10_000)
    drawn = False
    for n in names:
        curve = results.datasets[n].cer_curve
        if curve:
            xs = [bucket * (i + 1) for i in range(len(curve))]
            curves.step(xs, [100 * c for c in curve], where="post", marker=".", label=n)
            drawn = True
    if drawn:
        curves.legend(fontsize=8)
    else:
        curves.text(0.5, 0.5, "no gold passage ids", ha="center", va="center", transform=curves.transAxes)
    curves.set_xlabel("executor context tokens consumed")
    curves.set_ylabel("gold passages retrieved (%)")
    curves.set_ylim(0, 100)
    curves.set_title("CER-C curve")
    curves.grid(alpha=0.3)
    fig.suptitle(results.name)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
