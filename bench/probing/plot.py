"""One figure of probe learning curves: a panel per variant, P(again | plain) and P(again |
ambiguous) against the optimizer step (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def plot_probe_curves(
    curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = ""
) -> Path:
    """Write a PNG at `path` with one panel per entry of `curves` (label -> probe records with
    `step`, `p_plain`, `p_ambiguous`, and `ci95` of their difference), in the mapping's order.
    The difference's 95% interval is shaded above the plain curve (plain + its bounds: where the
    ambiguous curve may lie for the difference to be within it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not curves:
        raise ValueError("plot_probe_curves: no curves to plot")
    # The shared y axis runs from 0 to just above the highest point or interval bound (at most 1):
    # early in training both probabilities can be far below 1%.
    top = max(
        max(r["p_ambiguous"], r["p_plain"] + r["ci95"][1]) for records in curves.values() for r in records
    )
    top = min(1.0, max(1.1 * top, 0.01))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 4.4), sharey=True, squeeze=False)
    for ax, (label, records) in zip(axes[0], curves.items(), strict=True):
        records = sorted(records, key=lambda r: r["step"])
        steps = [r["step"] for r in records]
        plain = [r["p_plain"] for r in records]
        amb = [r["p_ambiguous"] for r in records]
        ax.plot(steps, plain, "o-", color="tab:blue", label="P(again | plain)")
        ax.plot(steps, amb, "s-", color="tab:red", label="P(again | ambiguous)")
        ax.fill_between(
            steps,
            [p + r["ci95"][0] for p, r in zip(plain, records, strict=True)],
            [p + r["ci95"][1] for p, r in zip(plain, records, strict=True)],
            color="tab:red",
            alpha=0.12,
            label="plain + 95% interval of the difference",
        )
        stop = next((r for r in records if r.get("stop")), None)
        if stop is not None:
            ax.axvline(stop["step"], color="grey", ls="--", lw=1, label=f"stopped ({stop['stop']})")
        ax.set_title(label)
        ax.set_xlabel("optimizer step")
        ax.set_ylim(0.0, top)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if top > 0.5:
            ax.axhline(0.5, color="black", lw=0.6, ls=":", label="0.5: greedy decoding searches again")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("P(search again) at the teacher's turn-2 prompt")
    # One legend under the panels: inside one it hid the points it sat on.
    handles, labels = axes[0][-1].get_legend_handles_labels()
    ncol = min(len(labels), 2 * len(curves))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8)
    if title:
        fig.suptitle(title)
    legend_rows = -(-len(labels) // ncol)
    fig.tight_layout(rect=(0, 0.045 * legend_rows + 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["plot_probe_curves"]
