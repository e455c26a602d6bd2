"""pareto.png read as figure objects: small markers with their intervals as error bars,
legend markers of one size, policies of equal cost apart, sweep labels clear of the
markers, and a value axis set by the points the verdicts are about, not by a growth path
that starts near chance."""

from __future__ import annotations

import math

from matplotlib.container import ErrorbarContainer
from matplotlib.lines import Line2D

from esper_core.compare.frontier import AxisFrontier, FrontierPoint, TaskFrontier
from esper_core.compare.growth_paths import GrowthPath, PathPoint
from esper_core.compare.pareto_plot import MARGIN, MARKER, pareto_figure
from esper_core.compare.results import ComparisonResults, MetricResult, ResultRow

# Policy -> (params, FLOPs, IQM accuracy, low, high); wait and static cost the same.
POINTS = {
    "heuristic": (1500.0, 3e9, 88.0, 86.0, 90.0),
    "wait": (1000.0, 2e9, 85.0, 83.0, 87.0),
    "static": (1000.0, 2e9, 85.5, 84.0, 87.5),
}
SWEEP = [("sweep.small", 500.0, 1e9, 80.0), ("sweep.base", 4000.0, 8e9, 91.0)]


def _row(policy: str) -> ResultRow:
    params, flops, acc, low, high = POINTS[policy]
    return ResultRow(
        task="glyphs",
        policy=policy,
        n=3,
        metrics={
            "params_forward": MetricResult(3, params, params),
            "train_flops": MetricResult(3, flops, flops),
            "final_test_acc": MetricResult(3, acc, acc, low, high),
        },
    )


def _results() -> ComparisonResults:
    axes = [
        AxisFrontier(axis, [FrontierPoint(p[0], p[1 + i], p[3], True) for p in SWEEP])
        for i, axis in enumerate(("params_forward", "train_flops"))
    ]
    # A grown run that starts near chance (20 %) and ends at 87 %.
    path = GrowthPath(
        "glyphs",
        "heuristic",
        0,
        [
            PathPoint(1, 1000.0, 1e8, 20.0, "val_acc", ["start"]),
            PathPoint(5, 1500.0, 1e9, 70.0, "val_acc", ["grew"]),
            PathPoint(10, 1500.0, 3e9, 87.0, "final_test_acc", ["end"]),
        ],
    )
    return ComparisonResults(
        schema_version=7,
        tasks=["glyphs"],
        policies=[*POINTS, *(label for label, *_ in SWEEP)],
        seeds=[0, 1, 2],
        baseline="wait",
        confidence=0.95,
        resamples=100,
        bootstrap_seed=0,
        rows=[_row(p) for p in POINTS],
        cells=[],
        missing=[],
        frontier=[TaskFrontier("glyphs", "final_test_acc", True, axes)],
        paths=[path],
        metrics={"glyphs": "final_test_acc"},
    )


def test_the_value_axis_is_set_by_the_points_not_by_a_path_from_chance() -> None:
    figure = pareto_figure(_results())
    values = [80.0, 91.0, 88.0, 86.0, 90.0, 85.0, 83.0, 87.0, 85.5, 84.0, 87.5]
    low, high = min(values), max(values)
    pad = MARGIN * (high - low)
    for ax in figure.axes:
        assert ax.get_ylim() == (low - pad, high + pad)
    title = figure._suptitle.get_text()
    assert (
        "paths are cut where they leave the axes, which the points and the final values set"
        in title
    )
    # Nor does the cut start stretch the cost axis: it spans the points drawn inside.
    flops = figure.axes[1]
    assert 1e8 < flops.get_xlim()[0] < 1e9 and flops.get_xlim()[1] > 8e9


def test_the_title_fits_the_figures_width() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = pareto_figure(_results())
    renderer = FigureCanvasAgg(figure).get_renderer()
    title = figure._suptitle
    assert len(title.get_text().splitlines()) > 3  # its long lines wrapped
    assert title.get_window_extent(renderer).width <= figure.bbox.width


def test_points_are_small_with_their_intervals_as_error_bars() -> None:
    ax = pareto_figure(_results()).axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == len(POINTS)
    for bar in bars:
        line, _caps, (segments,) = bar.lines
        assert line.get_markersize() == MARKER and bar.has_yerr
        (low, high) = sorted(segments.get_segments()[0][:, 1])
        assert (low, high) in {(p[3], p[4]) for p in POINTS.values()}


def test_legend_markers_have_one_size_whatever_the_data() -> None:
    ax = pareto_figure(_results()).axes[0]
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert {"heuristic", "size sweep", "heuristic: runs' paths"} <= set(labels)
    points = [
        h
        for h, label in zip(legend.legend_handles, labels)
        if isinstance(h, Line2D) and h.get_marker() == "o"
    ]
    assert len(points) == len(POINTS)
    assert {h.get_markersize() for h in points} == {MARKER}


def test_equal_costs_are_apart_and_sweep_labels_sit_beside_their_squares() -> None:
    ax = pareto_figure(_results()).axes[0]
    xs = [c.lines[0].get_xdata()[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]
    wait_x, static_x = sorted(x for x in xs if abs(math.log10(x / 1000.0)) < 0.05)
    assert wait_x < 1000.0 < static_x
    assert math.isclose(math.sqrt(wait_x * static_x), 1000.0)  # centred on their cost
    labels = {t.get_text(): t for t in ax.texts}
    assert {"small", "base"} <= set(labels)
    small = labels["small"]
    assert small.get_ha() == "left" and small.get_va() == "center"
    assert tuple(small.xyann) == (5, 0)  # to the right, at the square's height


def test_a_host_growth_is_a_jump_to_a_diamond_with_the_operator_written_once() -> None:
    import attrs

    note = "width 4x: parameters x14.0, FLOPs per epoch x11.0"
    points = [
        PathPoint(1, 1000.0, 1e9, 84.0, "val_acc", ["start"]),
        PathPoint(3, 1000.0, 2e9, 85.0, "val_acc", []),
        PathPoint(3, 14000.0, 2e9, 85.0, "val_acc", ["host_grew"], note),
        PathPoint(10, 14000.0, 5e9, 87.0, "final_test_acc", ["end"]),
    ]
    seeds = [GrowthPath("glyphs", "static", seed, points) for seed in (0, 1)]
    results = attrs.evolve(_results(), paths=seeds)
    for ax, x in zip(pareto_figure(results).axes, (14000.0, 2e9)):
        assert [t.get_text() for t in ax.texts].count(note) == 1  # one per policy
        diamonds = [
            c
            for c in ax.collections
            if c.get_paths()
            and len(c.get_offsets()) == 1
            and tuple(c.get_offsets()[0]) == (x, 85.0)
        ]
        assert len(diamonds) == 2  # one per seed
