"""Pareto frontier selection and the PNG plots."""

from __future__ import annotations

from PIL import Image

from executor_sft.eval.plots import Point, pareto_front, plot_capacity, plot_pareto, point_labels


def test_pareto_front_by_hand():
    pts = [
        Point("cheap", 1000, 0.40),
        Point("dominated", 3000, 0.35),  # more tokens and lower accuracy than "cheap"
        Point("strong", 5000, 0.60),
        Point("tie-worse", 5000, 0.55),  # same tokens as "strong", lower accuracy
        Point("costly", 9000, 0.61),
    ]
    assert [p.label for p in pareto_front(pts)] == ["cheap", "strong", "costly"]


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
