"""The Pareto figure of ``esper compare``: each task's metric against what it cost.

One row per task, two panels: parameters in the forward pass at the end, and training
FLOPs (both log scale). Each policy is a point at (mean cost, IQM of the task's metric)
with its bootstrap interval as error bar; a policy another one dominates on that
axis (:mod:`esper_core.compare.pareto`) is drawn hollow and marked "dominated". Equal
points are drawn as concentric rings, the first policy the largest.

Every task is drawn in its comparison metric (test loss for a language model,
:mod:`esper_core.compare.metric`). A task with a size sweep also shows the sweep's
points as grey squares and its frontier, the monotone hull of
:mod:`esper_core.compare.frontier`, as a line through the hull's vertices (straight on
the log axis, flat past the best point up to the costliest), and a policy is hollow when
the frontier verdict says it is dominated.

Each grown run of a growing policy is drawn as its path
(:mod:`esper_core.compare.growth_paths`): one thin, semi-transparent line per seed in the
policy's colour, from the end of its first epoch through every growth event (small
triangles) to its final point (a small dot). Along the way the value is the validation
metric (dashed); the last link, dotted, goes to the run's final test value, so a reader
does not take the validation numbers for test ones. Every seed is drawn rather than a
"median path": seeds grow at different epochs and by different amounts, so a path averaged
over them is one no run took; thin translucent lines keep ten seeds readable behind the
policy's IQM point, which stays on top.
"""

from __future__ import annotations

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


def plot_pareto(results: ComparisonResults, path: Path) -> None:
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
    frontiers = {f.task: f for f in results.frontier}
    for row_axes, task in zip(axes, tasks):
        frontier = frontiers.get(task)
        metric = METRIC[results.metric(task)]
        sweep = {p.label for a in frontier.axes for p in a.points} if frontier else set()
        for ax, axis in zip(row_axes, COST_AXES):
            if frontier is not None:
                _draw_sweep(ax, frontier, axis)
            labelled: set[str] = set()
            for grown in results.paths:
                if grown.task == task and grown.policy in policies:
                    color = palette(policies.index(grown.policy) % palette.N)
                    # One legend entry per policy, not one per seed.
                    label = None if grown.policy in labelled else f"{grown.policy}: runs' paths"
                    if _draw_path(ax, grown, axis, color, label):
                        labelled.add(grown.policy)
            for policy in policies:
                row = results.row(task, policy)
                if policy in sweep or row is None or row.metrics[axis].mean <= 0:
                    continue  # a cost not recorded (0) has no place on a log axis
                color = palette(policies.index(policy) % palette.N)
                cost, y = row.metrics[axis], row.metrics[metric.key]
                verdict = frontier.verdict(policy, axis) if frontier else None
                hollow = verdict.dominated if verdict else axis in row.dominated
                ax.errorbar(
                    [cost.mean],
                    [y.iqm],
                    yerr=_err(y.iqm, y.low, y.high),
                    fmt="o",
                    color=color,
                    markerfacecolor="white" if hollow else color,
                    # Earlier policies drawn larger: equal points show as concentric rings.
                    markersize=6 + 3 * (len(policies) - 1 - policies.index(policy)),
                    capsize=3,
                    zorder=4,
                    label=policy + (" (dominated)" if hollow else ""),
                )
            ax.set_xscale("log")
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
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="best")
    fig.suptitle(
        f"IQM value ({results.confidence:.0%} bootstrap CI) and mean cost over "
        f"{len(results.seeds)} seed(s); hollow: dominated on that axis"
        + ("; grey: the size sweep and its frontier" if frontiers else "")
        + (
            "\nthin lines: each grown run's path, validation value at each growth event "
            "(dashed, triangles), dotted to its final test value"
            if results.paths
            else ""
        ),
        fontsize=10,
    )
    with atomic_writer(path) as fh:
        fig.savefig(fh, format="png")


def _err(center: float, low: float | None, high: float | None) -> list[list[float]] | None:
    if low is None or high is None:
        return None
    return [[max(center - low, 0.0)], [max(high - center, 0.0)]]


def _draw_sweep(ax: Any, frontier: TaskFrontier, axis: str) -> None:
    """The sweep's points (squares, labelled) and its frontier: the hull of those mean
    points, the same hull the on-frontier marks come from."""
    points = next(a.points for a in frontier.axes if a.axis == axis)
    points = [p for p in points if p.cost > 0]
    if not points:
        return
    ax.scatter(
        [p.cost for p in points],
        [p.value for p in points],
        marker="s",
        color="0.55",
        s=24,
        zorder=2,
    )
    for p in points:
        ax.annotate(
            p.label.removeprefix("sweep."),
            (p.cost, p.value),
            fontsize=6,
            color="0.4",
            xytext=(3, -8),
            textcoords="offset points",
        )
    curve = frontier_curve({p.label: (p.cost, p.value) for p in points}, frontier.higher_is_better)
    ax.plot(
        [c for c, _ in curve],
        [v for _, v in curve],
        color="0.55",
        linewidth=1.5,
        zorder=1,
        label="size-sweep frontier",
    )


def _draw_path(ax: Any, path: GrowthPath, axis: str, color: Any, label: str | None) -> bool:
    """One run's path on one cost axis: validation links dashed, the link to the final
    test value dotted, growth events as triangles; whether anything was drawn."""
    points = [p for p in path.points if getattr(p, axis) > 0]
    if len(points) < 2:
        return False
    xs = [getattr(p, axis) for p in points]
    ys = [p.value for p in points]
    style = {"color": color, "alpha": 0.35, "linewidth": 0.8, "zorder": 3}
    ax.plot(xs[:-1], ys[:-1], linestyle="--", label=label, **style)
    ax.plot(xs[-2:], ys[-2:], linestyle=":", **style)
    grown = [p for p in points if set(p.events) & {"grew", "fossilized", "pruned"}]
    ax.scatter(
        [getattr(p, axis) for p in grown],
        [p.value for p in grown],
        marker="^",
        s=10,
        color=color,
        alpha=0.5,
        linewidths=0,
        zorder=3,
    )
    ax.scatter([xs[-1]], [ys[-1]], marker="o", s=8, color=color, alpha=0.5, linewidths=0, zorder=3)
    return True
