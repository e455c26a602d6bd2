"""The Pareto figure of ``esper compare``: final test accuracy against what it cost.

One row per task, two panels: parameters in the forward pass at the end, and training
FLOPs (both log scale). Each policy is a point at (mean cost, IQM accuracy) with the
bootstrap interval of the accuracy as error bar; a policy another one dominates on that
axis (:mod:`esper_core.compare.pareto`) is drawn hollow and marked "dominated". Equal
points are drawn as concentric rings, the first policy the largest.
"""

from __future__ import annotations

from pathlib import Path

from esper_core.compare.pareto import COST_AXES
from esper_core.compare.results import IMPROVEMENT_METRIC, METRIC, ComparisonResults
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
    acc = METRIC[IMPROVEMENT_METRIC]
    for row_axes, task in zip(axes, tasks):
        for ax, axis in zip(row_axes, COST_AXES):
            for policy in policies:
                row = results.row(task, policy)
                if row is None or row.metrics[axis].mean <= 0:
                    continue  # a cost not recorded (0) has no place on a log axis
                color = palette(policies.index(policy) % palette.N)
                cost, y = row.metrics[axis], row.metrics[IMPROVEMENT_METRIC]
                hollow = axis in row.dominated
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
                    label=policy + (" (dominated)" if hollow else ""),
                )
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide
            ax.set_xlabel(METRIC[axis].title, fontsize=9)
            ax.set_ylabel(f"{acc.title} ({acc.unit})", fontsize=9)
            ax.set_title(task, fontsize=10)
            ax.grid(alpha=0.3, which="both")
            ax.tick_params(labelsize=8)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="best")
    fig.suptitle(
        f"IQM accuracy ({results.confidence:.0%} bootstrap CI) and mean cost over "
        f"{len(results.seeds)} seed(s); hollow: dominated on that axis",
        fontsize=10,
    )
    with atomic_writer(path) as fh:
        fig.savefig(fh, format="png")


def _err(center: float, low: float | None, high: float | None) -> list[list[float]] | None:
    if low is None or high is None:
        return None
    return [[max(center - low, 0.0)], [max(high - center, 0.0)]]
