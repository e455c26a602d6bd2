"""The interval figure of ``esper compare``: one panel per metric, one line per policy.

The main panels are in each task's metric (test loss for a language model) and the
probability panel is P(better than the baseline) in it.

Each line is a confidence interval with its IQM marked; panels of a single task also
show every run as a faint dot, so a reader sees the spread the interval summarises.
Rendered with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esper_core.compare.metric import MIXED, higher_is_better
from esper_core.compare.results import METRIC, ComparisonResults
from esper_core.run.checkpoint import atomic_writer

DPI = 150
PANEL_WIDTH = 4.2
ROW_HEIGHT = 0.55


def _label(value: float, kind: str) -> str:
    if kind == "improvement":
        return f"{value:.2f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _improvement_title(metric: str, baseline: str) -> str:
    if metric == MIXED:
        return f"P(better than {baseline}, each task in its metric)"
    sign = ">" if higher_is_better(metric) else "<"
    return f"P({METRIC[metric].title} {sign} {baseline})"


def _panels(results: ComparisonResults) -> list[dict[str, Any]]:
    """The main metric of each task (and of all tasks, if they share it), P(better than
    the baseline), and the parameters added."""
    pooled = len(results.tasks) > 1
    panels: list[dict[str, Any]] = []
    for task in [*results.tasks, *([None] if pooled else [])]:
        metric = results.metric(task)
        if metric == MIXED:
            continue  # pooling accuracy with loss means nothing: the tasks' panels say it
        m = METRIC[metric]
        unit = f" ({m.unit})" if m.unit else ""
        lower = "" if higher_is_better(metric) else ", lower is better"
        where = task if task is not None else "all tasks"
        panels.append(
            {
                "kind": "metric",
                "metric": metric,
                "task": task,
                "title": f"{m.title}{unit}{lower}\n{where}",
            }
        )
    if results.baseline:
        where = "all tasks" if pooled else results.tasks[0]
        title = _improvement_title(results.metric(None), results.baseline)
        panels.append(
            {
                "kind": "improvement",
                "task": None if pooled else results.tasks[0],
                "title": f"{title}\n{where}",
            }
        )
    params = METRIC["params_added"]
    panels.append(
        {
            "kind": "metric",
            "metric": params.key,
            "task": None if pooled else results.tasks[0],
            "title": f"{params.title}\n{'all tasks' if pooled else results.tasks[0]}",
        }
    )
    return panels


def plot_intervals(results: ComparisonResults, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    policies = list(results.policies)
    panels = _panels(results)
    palette = matplotlib.colormaps["tab10"]
    height = max(2.4, 1.5 + ROW_HEIGHT * len(policies))
    fig = Figure(figsize=(PANEL_WIDTH * len(panels), height), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    ys = {p: len(policies) - 1 - i for i, p in enumerate(policies)}  # first policy on top
    for ax, panel in zip(axes, panels):
        for policy in policies:
            row = results.row(panel["task"], policy)
            if row is None:
                continue
            y, color = ys[policy], palette(policies.index(policy) % palette.N)
            if panel["kind"] == "improvement":
                imp = row.improvement
                if imp is None or policy == results.baseline:
                    continue
                estimate, low, high = imp.probability, imp.low, imp.high
            else:
                m = row.metrics[panel["metric"]]
                estimate, low, high = m.iqm, m.low, m.high
                if panel["task"] is not None:
                    runs = [
                        c.value(panel["metric"])
                        for c in results.cells
                        if c.task == panel["task"] and c.policy == policy
                    ]
                    ax.scatter(
                        runs,
                        [y - 0.22] * len(runs),
                        s=12,
                        color=color,
                        alpha=0.45,
                        linewidths=0,
                        zorder=2,
                    )
            if low is not None and high is not None:
                ax.hlines(y, low, high, color=color, linewidth=7, alpha=0.55, zorder=1)
            ax.plot(
                [estimate],
                [y],
                marker="|",
                markersize=16,
                markeredgewidth=2.5,
                color="black",
                zorder=3,
            )
            ax.annotate(
                _label(estimate, panel["kind"]),
                (estimate, y),
                xytext=(0, 9),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
                bbox={
                    "boxstyle": "round,pad=0.15",
                    "facecolor": "white",
                    "edgecolor": "none",
                    "alpha": 0.8,
                },
            )
        if panel["kind"] == "improvement":
            ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
            ax.set_xlim(-0.02, 1.02)
        ax.margins(x=0.08)
        ax.set_title(panel["title"], fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_ylim(-0.7, len(policies) - 0.3)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_yticks([ys[p] for p in policies], policies, fontsize=10)
    fig.suptitle(
        f"IQM with {results.confidence:.0%} bootstrap CI over {len(results.seeds)} seed(s); dots: single runs",
        fontsize=10,
    )
    with atomic_writer(path) as fh:
        fig.savefig(fh, format="png")
