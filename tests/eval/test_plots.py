"""Pareto frontier selection and the PNG plots."""

from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text
from PIL import Image

from executor_sft.eval.aggregate import summarize
from executor_sft.eval.plots import (
    MISSING,
    Point,
    capacity_figure,
    curve_gain,
    pareto_figure,
    pareto_front,
    percent_limits,
    plot_capacity,
    plot_pareto,
    plot_role_curves,
    point_labels,
    role_curves_figure,
    summary_figure,
    wrap_label,
)
from executor_sft.schema import Episode, EpisodeMetrics, Question


def test_pareto_front_by_hand():
    pts = [
        Point("cheap", 1000, 0.40),
        Point("dominated", 3000, 0.35),  # more tokens and lower accuracy than "cheap"
        Point("strong", 5000, 0.60),
        Point("tie-worse", 5000, 0.55),  # same tokens as "strong", lower accuracy
        Point("costly", 9000, 0.61),
    ]
    assert [p.label for p in pareto_front(pts)] == ["cheap", "strong", "costly"]


def test_the_latency_x_axis_ranks_by_research_time(tmp_path):
    pts = [
        Point("fast-few-tokens", 100, 0.40, research_s=30.0),  # cheapest in tokens, slowest in time
        Point("slow-many-tokens", 900, 0.45, research_s=5.0),
        Point("untimed", 50, 0.90),
    ]
    assert [p.label for p in pareto_front(pts)] == ["untimed"]
    assert [p.label for p in pareto_front(pts, x="research_s")] == ["slow-many-tokens"]
    assert plot_pareto(pts, tmp_path / "t.png", "EM", x="research_s").stat().st_size > 5_000
    with pytest.raises(ValueError, match="x axis"):
        plot_pareto(pts, tmp_path / "bad.png", x="seconds")


def test_plots_write_pngs(tmp_path):
    pts = [
        Point(f"{b}+{e}", t, a, backbone=b, executor=e)
        for b, e, t, a in [
            ("s", "s", 100, 0.2),
            ("s", "l", 300, 0.3),
            ("l", "s", 120, 0.35),
            ("l", "l", 320, 0.5),
        ]
    ]
    for path in (plot_pareto(pts, tmp_path / "p.png", "EM"), plot_capacity(pts, tmp_path / "c.png", "EM")):
        assert path.stat().st_size > 5_000
        with Image.open(path) as img:
            assert img.format == "PNG" and img.size[0] > 300


def test_coincident_points_share_one_label():
    pts = [Point("tiny+a", 500, 0.25), Point("tiny+b", 500, 0.25), Point("big", 900, 0.5)]
    assert sorted(point_labels(pts)) == [(500, 25.0, "tiny+a = tiny+b"), (900, 50.0, "big")]


def test_role_curves_gain_is_the_papers_delta(tmp_path):
    """Fig. 2's arrows on the paper's own EM (Tab. 2 backbones; Tab. 3's untuned executors)."""
    scale = ["qwen3-1_7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "v4-flash"]
    decomposition = [0.2786, 0.2804, 0.2959, 0.3226, 0.3394, 0.3918]
    execution = [0.3918, 0.4001, 0.4104, 0.4068, 0.4045, 0.4177]
    assert round(100 * curve_gain(decomposition), 2) == 11.32  # Sec. 4.3: "more than eleven points"
    assert round(100 * curve_gain(execution), 2) == 2.59  # Sec. 4.4-4.5: 2.59, "ΔEM ≈ 2.6"
    assert curve_gain([None, 0.3, None, 0.5]) == 0.5 - 0.3 and curve_gain([0.3, None]) is None
    path = plot_role_curves(scale, decomposition, [*execution[:-1], None], tmp_path / "roles.png", "EM")
    with Image.open(path) as img:
        assert img.format == "PNG" and img.size[0] > 300


def _inside_figure(fig) -> list[str]:
    """Texts (labels, titles, legends, annotations) and drawn tick labels whose box leaves the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox

    def outside(ext) -> bool:
        return ext.x0 < box.x0 - 1 or ext.y0 < box.y0 - 1 or ext.x1 > box.x1 + 1 or ext.y1 > box.y1 + 1

    ticks = {id(t) for ax in fig.axes for t in [*ax.get_xticklabels(), *ax.get_yticklabels()]}
    out = [
        text.get_text()
        for text in fig.findobj(Text)
        if id(text) not in ticks
        and text.get_visible()
        and text.get_text().strip()
        and outside(text.get_window_extent(renderer))
    ]
    # Tick labels outside the view limits exist but are not drawn; the axes' tight box holds the drawn ones.
    out += [f"axes {i}" for i, ax in enumerate(fig.axes) if outside(ax.get_tightbbox(renderer))]
    plt.close(fig)
    return out


LONG = ["qwen3-32b+qwen3-1.7b-sft", "qwen3-32b+qwen3-1.7b", "qwen3-32b+qwen3-4b", "qwen3-32b+v4-flash"]


def test_every_label_stays_inside_the_figure_without_layout_warnings():
    """Coinciding cells at the top right corner (their joined label once ran off the figure)."""
    pts = [Point(name, 9000, 1.0, backbone="qwen3-32b", executor=name.split("+")[1]) for name in LONG]
    pts += [Point("qwen3-1.7b+qwen3-1.7b", 0, 0.0, backbone="qwen3-1.7b", executor="qwen3-1.7b")]
    pts += [Point("mid", 4000, 0.5, backbone="qwen3-1.7b", executor="qwen3-4b")]
    scale = ["qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "v4-flash-with-a-long-name"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied" and its kind fail the test
        figures = {
            "pareto": pareto_figure(pts, "EM", title="a sweep"),
            "capacity": capacity_figure(pts, "EM"),
            "roles": role_curves_figure(scale, [0.0, 0.1, None, 0.3, 0.5, 1.0], [1.0] * 6, "EM"),
            "summary": summary_figure(summarize(_episodes(), "one evaluation")),
        }
        outside = {name: _inside_figure(fig) for name, fig in figures.items()}
    assert outside == {name: [] for name in figures}
    assert wrap_label(" = ".join(LONG)).count("\n") >= 2  # the joined label is wrapped


def test_percent_axes_pad_the_data_inside_0_to_100():
    assert percent_limits([100.0, 100.0]) == (80.0, 100.0)  # a flat 100: not 95-105
    assert percent_limits([0.0, 0.0]) == (0.0, 20.0)
    assert percent_limits([0.0, 100.0]) == (0.0, 100.0)
    lo, hi = percent_limits([40.0, 50.0])
    assert lo < 40 and hi > 50 and hi - lo >= 20
    fig = pareto_figure([Point("a", 100, 1.0), Point("b", 200, 1.0)], "EM")
    ax = fig.axes[0]
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert max(ticks) == 100 and min(ticks) >= 80 and ax.get_ylim()[1] < 101
    plt.close(fig)


def _episodes() -> list[Episode]:
    """Dataset "zero": EM, F1 and judge all 0; dataset "unjudged": EM 1 and no judge verdict."""
    zero = Question(id="z", question="?", golden_answers=["Rush"], dataset="zero")
    full = Question(id="u", question="?", golden_answers=["Rush"], dataset="unjudged")
    return [
        Episode(
            episode_id="z#0", question=zero, answer="no", metrics=EpisodeMetrics(em=0.0, f1=0.0, judge=False)
        ),
        Episode(episode_id="u#0", question=full, answer="Rush", metrics=EpisodeMetrics(em=1.0, f1=1.0)),
    ]


def test_a_zero_score_is_drawn_and_a_missing_one_is_marked():
    results = summarize(_episodes(), "zero vs missing")
    assert results.datasets["zero"].judge.mean == 0.0 and results.datasets["unjudged"].judge is None
    fig = summary_figure(results)
    bars = fig.axes[0]
    labels = [t.get_text() for t in bars.texts]
    assert labels.count("0") == 3  # EM, F1 and judge of "zero", each labelled with its value
    assert labels.count(MISSING) == 1  # the judge of "unjudged": no bar, marked as missing
    assert labels.count("100") == 2
    stubs = [line for line in bars.get_lines() if list(line.get_ydata()) == [0, 0]]
    assert len(stubs) == 3 and all(line.get_linewidth() >= 2 for line in stubs)  # a zero is visible
    assert _inside_figure(fig) == []


def test_role_curves_break_at_a_missing_cell_and_mark_it():
    fig = role_curves_figure(["a", "b", "c"], [0.0, None, 0.5], [0.2, 0.3, 0.4], "EM")
    ax = fig.axes[0]
    red = next(line for line in ax.get_lines() if line.get_label().startswith("scaling decomposition"))
    ys = list(red.get_ydata())
    assert ys[0] == 0.0 and ys[1] != ys[1] and ys[2] == 50.0  # 0 drawn, the gap is NaN (no line through it)
    assert [t.get_text() for t in ax.texts].count(MISSING) == 1
    plt.close(fig)
