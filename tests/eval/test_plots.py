"""Pareto frontier selection and the PNG plots."""

from __future__ import annotations

import pytest
from PIL import Image

from executor_sft.eval.plots import (
    Point,
    curve_gain,
    pareto_front,
    plot_capacity,
    plot_pareto,
    plot_role_curves,
    point_labels,
)


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
