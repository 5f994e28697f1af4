"""The width/depth sweep's PNG: the score and the sub-agent tokens against each axis's budget.

Kept apart from `eval.plots` (the model-pair sweep's figures): it reads `BudgetRow`s only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

LABELS = {"item_f1": "item F1", "row_f1": "row F1", "success": "success rate", "em": "EM (text questions)"}
SHORT = {"max_parallel": "P", "max_rounds": "T", "max_turns": "K"}


def budget_figure(rows: Sequence, metric: str = "item_f1", title: str | None = None):
    """Left: `metric` (Avg@k, %) per axis against its budget; right: sub-agent tokens per question."""
    fig, (score, cost) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110, layout="constrained")
    axes = list(dict.fromkeys(r.axis for r in rows))
    for name in axes:
        line = sorted((r for r in rows if r.axis == name), key=lambda r: r.value)
        letter = SHORT.get(line[0].field, line[0].field)
        label = name if f"({letter})" in name else f"{name} ({letter} varied)"
        xs = [r.value for r in line]
        ys = [100 * (r.metric(metric) or 0.0) for r in line]
        (drawn,) = score.plot(xs, ys, marker="o", label=label, clip_on=False)
        for x, y in zip(xs, ys, strict=True):
            score.annotate(
                f"{y:.0f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7
            )
        cost.plot(xs, [r.subagent_tokens for r in line], marker="o", label=label, color=drawn.get_color())
    values = sorted({r.value for r in rows})
    for ax in (score, cost):
        ax.set_xticks(values)
        ax.set_xlabel("budget: sub-agents per round (P) or turns (T, K)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    score.set_ylim(-3, 108)
    score.set_yticks(range(0, 101, 20))
    score.set_ylabel(f"{LABELS.get(metric, metric)} (%), Avg@k")
    score.set_title("score")
    cost.set_ylim(bottom=0)
    cost.set_ylabel("sub-agent tokens per question")
    cost.set_title("cost")
    if title:
        fig.suptitle(title)
    return fig


def plot_budget_sweep(
    rows: Sequence, path: str | Path, metric: str = "item_f1", title: str | None = None
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = budget_figure(rows, metric, title)
    fig.savefig(path)
    plt.close(fig)
    return path
