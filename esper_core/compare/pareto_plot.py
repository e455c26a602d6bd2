"""The Pareto figure of ``esper compare``: each task's metric against what it cost.

One row per task, two panels: parameters in the forward pass at the end, and training
FLOPs (both log scale). Each policy is a point at (mean cost, IQM of the task's metric)
with its bootstrap interval as error bar; a policy another one dominates on that
axis (:mod:`esper_core.compare.pareto`) is drawn hollow and marked "dominated". Markers
are small so that the intervals show; policies of equal cost are nudged apart sideways
(a fraction of a percent on the log axis) rather than drawn over each other. The legend's
markers have one fixed size, whatever the data's.

The value axis is set by what the verdicts are about: the policies' points with their
intervals, the sweep's points and frontier, and the grown runs' final points. A growth
path that starts near chance is cut at the axis instead of stretching it (the figure's
title says so), so the region where the points lie is not squeezed.

Every task is drawn in its comparison metric (test loss for a language model,
:mod:`esper_core.compare.metric`). A task with a size sweep also shows the sweep's
points as grey squares and its frontier, the monotone hull of
:mod:`esper_core.compare.frontier`, as a line through the hull's vertices (straight on
the log axis, flat past the best point up to the costliest), each labelled to its right
(clear of its own marker and of the vertical error bars), and a policy is hollow when
the frontier verdict says it is dominated.

Each grown run of a growing policy is drawn as its path
(:mod:`esper_core.compare.growth_paths`): one thin, semi-transparent line per seed in the
policy's colour, from the end of its first epoch through every growth event (small
triangles) to its final point (a small dot). A growth of the host itself is a jump in
parameters at one epoch, ending in a small diamond; the first run of each policy has the
operator's jump written beside it ("width 4x: parameters x14.1, FLOPs per epoch x11.0"). Along the way the value is the validation
metric (dashed); the last link, dotted, goes to the run's final test value, so a reader
does not take the validation numbers for test ones. Every seed is drawn rather than a
"median path": seeds grow at different epochs and by different amounts, so a path averaged
over them is one no run took; thin translucent lines keep ten seeds readable behind the
policy's IQM point, which stays on top.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from esper_core.compare.frontier import TaskFrontier, frontier_curve
from esper_core.compare.growth_paths import GrowthPath
from esper_core.compare.metric import higher_is_better
from esper_core.compare.pareto import COST_AXES
from esper_core.compare.results import METRIC, ComparisonResults
from esper_core.run.checkpoint import atomic_writer

DPI = 150
PANEL = (5.2, 3.8)
MARKER = 5  # points: every policy's marker, in the plot and in the legend
CHARS_PER_INCH = 12  # of the 10-point title: about 0.55 em a character
LEGEND_INSIDE = 8  # legend entries that fit inside a panel; more go below it
LEGEND_ROW = 0.2  # inches: one row of a 7-point legend, with its share of the panel
DODGE = 0.012  # decades between policies of equal cost on a log axis
MARGIN = 0.08  # of the value range, above and below it


def plot_pareto(results: ComparisonResults, path: Path) -> None:
    fig = pareto_figure(results)
    with atomic_writer(path) as fh:
        fig.savefig(fh, format="png")


def pareto_figure(results: ComparisonResults) -> Any:
    """The figure itself (matplotlib's object API, no pyplot), for saving or inspecting."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    policies = list(results.policies)
    tasks = list(results.tasks)
    palette = matplotlib.colormaps["tab10"]
    fig = Figure(
        figsize=(PANEL[0] * len(COST_AXES), PANEL[1] * len(tasks)), dpi=DPI, layout="constrained"
    )
    axes = fig.subplots(len(tasks), len(COST_AXES), squeeze=False)
    below_rows = 0  # rows of the tallest legend set below its panel
    frontiers = {f.task: f for f in results.frontier}
    clipped = False
    for row_axes, task in zip(axes, tasks):
        frontier = frontiers.get(task)
        metric = METRIC[results.metric(task)]
        sweep = {p.label for a in frontier.axes for p in a.points} if frontier else set()
        for ax, axis in zip(row_axes, COST_AXES):
            handles: list[Any] = []
            values: list[float] = []  # what sets the value axis
            costs: list[float] = []  # and the cost axis
            if frontier is not None:
                for sweep_cost, sweep_value in _draw_sweep(ax, frontier, axis, handles):
                    costs.append(sweep_cost)
                    values.append(sweep_value)
            labelled: set[str] = set()
            path_points: list[tuple[float, float]] = []
            for grown in results.paths:
                if grown.task == task and grown.policy in policies:
                    color = palette(policies.index(grown.policy) % palette.N)
                    # The operator's jump is written out once per policy, not per seed.
                    note = grown.policy not in labelled
                    drawn = _draw_path(ax, grown, axis, color, note)
                    if drawn:
                        costs.append(drawn[-1][0])  # the run's final point
                        values.append(drawn[-1][1])
                        path_points += drawn
                        if grown.policy not in labelled:  # one entry per policy, not per seed
                            labelled.add(grown.policy)
                            handles.append(_path_handle(color, f"{grown.policy}: runs' paths"))
            shown = [
                (policy, row)
                for policy in policies
                if policy not in sweep
                and (row := results.row(task, policy)) is not None
                and row.metrics[axis].mean > 0  # a cost not recorded (0): no place on a log axis
            ]
            nudge = _dodge([row.metrics[axis].mean for _, row in shown])
            for (policy, row), factor in zip(shown, nudge):
                color = palette(policies.index(policy) % palette.N)
                cost, y = row.metrics[axis], row.metrics[metric.key]
                verdict = frontier.verdict(policy, axis) if frontier else None
                hollow = verdict.dominated if verdict else axis in row.dominated
                face = "white" if hollow else color
                label = policy + (" (dominated)" if hollow else "")
                ax.errorbar(
                    [cost.mean * factor],
                    [y.iqm],
                    yerr=_err(y.iqm, y.low, y.high),
                    fmt="o",
                    color=color,
                    markerfacecolor=face,
                    markersize=MARKER,
                    elinewidth=1.0,
                    capsize=2.5,
                    zorder=4,
                    label=label,
                )
                values += [v for v in (y.iqm, y.low, y.high) if v is not None]
                costs.append(cost.mean * factor)
                handles.append(_point_handle(color, face, label))
            ax.set_xscale("log")
            limits = _value_limits(values)
            if limits is not None:
                ax.set_ylim(*limits)
                inside = [c for c, v in path_points if limits[0] <= v <= limits[1]]
                clipped |= len(inside) < len(path_points)
                # The cost axis spans what is visible: a path's start cut off below the
                # value axis would otherwise stretch it too.
                ax.set_xlim(*_cost_limits([*costs, *inside]))
            ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide
            ax.set_xlabel(METRIC[axis].title, fontsize=9)
            unit = f" ({metric.unit})" if metric.unit else ""
            lower = not higher_is_better(metric.key)
            ax.set_ylabel(
                f"{metric.title}{unit}" + (", lower is better" if lower else ""), fontsize=9
            )
            ax.set_title(task, fontsize=10)
            ax.grid(alpha=0.3, which="both")
            ax.tick_params(labelsize=8)
            if len(handles) > LEGEND_INSIDE:
                # Too many entries to sit inside the axes without covering the points.
                below_rows = max(below_rows, math.ceil(len(handles) / 2))
                ax.legend(
                    handles=handles,
                    fontsize=7,
                    loc="upper center",
                    bbox_to_anchor=(0.5, -0.2),  # below the cost axis's label
                    ncol=2,
                )
            elif handles:
                ax.legend(handles=handles, fontsize=7, loc="best")
    title = (
        f"IQM value ({results.confidence:.0%} bootstrap CI) and mean cost over "
        f"{len(results.seeds)} seed(s); hollow: dominated on that axis"
        + ("; grey: the size sweep and its frontier" if frontiers else "")
        + (
            "\nthin lines: each grown run's path, validation value at each growth event "
            "(dashed, triangles; the host's own growth: a jump to a diamond), dotted to its "
            "final test value"
            + (
                "\npaths are cut where they leave the axes, which the points and the final "
                "values set"
                if clipped
                else ""
            )
            if results.paths
            else ""
        )
    )
    if below_rows:
        # Legends below the panels: the figure grows by their height, the panels keep theirs.
        fig.set_figheight(fig.get_figheight() + (LEGEND_ROW * below_rows + 0.5) * len(tasks))
    # The figure is as wide as its panels: a line longer than that would be cut at both edges.
    width = round(fig.get_figwidth() * CHARS_PER_INCH)
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=10)
    return fig


def _value_limits(values: list[float]) -> tuple[float, float] | None:
    """The value axis around ``values`` with a margin; None when there is nothing."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    span = high - low or max(abs(high) * 0.02, 1e-3)
    return low - MARGIN * span, high + MARGIN * span


def _cost_limits(costs: list[float]) -> tuple[float, float]:
    """A log cost axis around ``costs`` (all positive), with a margin for the labels."""
    low, high = math.log10(min(costs)), math.log10(max(costs))
    span = high - low or 0.2
    return 10 ** (low - MARGIN * span), 10 ** (high + 2 * MARGIN * span)


def _dodge(costs: list[float]) -> list[float]:
    """A factor per point: 1, or a small sideways step for points of exactly equal cost,
    spread symmetrically so that a group stays centred on its cost."""
    factors = [1.0] * len(costs)
    groups: dict[float, list[int]] = {}
    for i, cost in enumerate(costs):
        groups.setdefault(cost, []).append(i)
    for members in groups.values():
        for k, i in enumerate(members):
            factors[i] = 10 ** (DODGE * (k - (len(members) - 1) / 2))
    return factors


def _point_handle(color: Any, face: Any, label: str) -> Any:
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        linestyle="none",
        marker="o",
        markersize=MARKER,
        color=color,
        markerfacecolor=face,
        label=label,
    )


def _path_handle(color: Any, label: str) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, alpha=0.6, linewidth=0.8, linestyle="--", label=label)


def _err(center: float, low: float | None, high: float | None) -> list[list[float]] | None:
    if low is None or high is None:
        return None
    return [[max(center - low, 0.0)], [max(high - center, 0.0)]]


def _draw_sweep(
    ax: Any, frontier: TaskFrontier, axis: str, handles: list[Any]
) -> list[tuple[float, float]]:
    """The sweep's points (squares, labelled to their right) and its frontier: the hull of
    those mean points, the same hull the on-frontier marks come from; (cost, value) of each."""
    from matplotlib.lines import Line2D

    points = next(a.points for a in frontier.axes if a.axis == axis)
    points = [p for p in points if p.cost > 0]
    if not points:
        return []
    ax.scatter(
        [p.cost for p in points],
        [p.value for p in points],
        marker="s",
        color="0.55",
        s=16,
        zorder=2,
    )
    for p in points:
        # To the right, vertically centred: clear of the square and of the vertical error
        # bars of a policy at the same cost.
        ax.annotate(
            p.label.removeprefix("sweep."),
            (p.cost, p.value),
            fontsize=6,
            color="0.4",
            xytext=(5, 0),
            textcoords="offset points",
            ha="left",
            va="center",
        )
    curve = frontier_curve(
        {p.label: (p.cost, p.value) for p in points},
        frontier.higher_is_better,
        [p.label for p in points if p.on_frontier],
    )
    ax.plot(
        [c for c, _ in curve],
        [v for _, v in curve],
        color="0.55",
        linewidth=1.5,
        zorder=1,
        label="size-sweep frontier",
    )
    handles.append(
        Line2D([], [], color="0.55", linewidth=1.5, marker="s", markersize=4, label="size sweep")
    )
    return [(p.cost, p.value) for p in points]


def _draw_path(
    ax: Any, path: GrowthPath, axis: str, color: Any, note: bool = False
) -> list[tuple[float, float]]:
    """One run's path on one cost axis: validation links dashed, the link to the final
    test value dotted, seed growth events as triangles, the host's own growth as a
    diamond at the end of its jump (``note``: with the operator's jump written beside
    it); the (cost, value) points drawn (the last is the run's final point), empty when
    nothing was."""
    points = [p for p in path.points if getattr(p, axis) > 0]
    if len(points) < 2:
        return []
    xs = [getattr(p, axis) for p in points]
    ys = [p.value for p in points]
    style = {"color": color, "alpha": 0.35, "linewidth": 0.8, "zorder": 3}
    ax.plot(xs[:-1], ys[:-1], linestyle="--", **style)
    ax.plot(xs[-2:], ys[-2:], linestyle=":", **style)

    def mark(marked: list[Any], marker: str, size: float, alpha: float) -> None:
        ax.scatter(
            [getattr(p, axis) for p in marked],
            [p.value for p in marked],
            marker=marker,
            s=size,
            color=color,
            alpha=alpha,
            linewidths=0,
            zorder=3,
        )

    mark([p for p in points if set(p.events) & {"grew", "fossilized", "pruned"}], "^", 10, 0.5)
    ax.scatter([xs[-1]], [ys[-1]], marker="o", s=8, color=color, alpha=0.5, linewidths=0, zorder=3)
    host = [p for p in points if "host_grew" in p.events]
    mark(host, "D", 14, 0.6)
    for p in host if note else []:
        ax.annotate(
            p.note,
            (getattr(p, axis), p.value),
            xytext=(4, -10),
            textcoords="offset points",
            fontsize=6,
            color=color,
        )
    return list(zip(xs, ys))
