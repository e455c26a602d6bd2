"""The ``frontier`` section of a comparison's results, from its finished cells.

Per task with size-sweep cells, on each cost axis: the sweep's points (mean cost, IQM of
the task's frontier metric over seeds) marked on or off the frontier (the monotone hull
of their *validation* values passes through it or not: the sizes are chosen as a
researcher chooses them, and reported at their test values), and for every other
policy of the task (static-final baselines included) a :class:`FrontierVerdict`. The
numbers come from :mod:`esper_core.compare.frontier`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from esper_core.compare.frontier import (
    AxisFrontier,
    FrontierPoint,
    FrontierVerdict,
    Point,
    TaskFrontier,
    dominators,
    frontier,
    frontier_gap,
)
from esper_core.compare.metric import ACCURACY, VALIDATION, higher_is_better
from esper_core.compare.pareto import COST_AXES
from esper_core.compare.stats import iqm

if TYPE_CHECKING:
    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.experiment import Experiment


def _summary_point(runs: Sequence[CellResult], axis: str, metric: str) -> Point:
    """Mean cost and IQM value over seeds, as in the rows of the results."""
    return (
        float(np.mean([r.value(axis) for r in runs])),
        float(iqm([r.value(metric) for r in runs])),
    )


def _task_frontier(
    experiment: Experiment,
    task: str,
    metric: str,
    by_policy: Mapping[str, Sequence[CellResult]],
    sweep: Sequence[str],
) -> TaskFrontier:
    higher = higher_is_better(metric)
    sizes = [s for s in sweep if by_policy.get(s)]
    policies = [p for p in by_policy if p not in sweep and by_policy[p]]
    axes, verdicts = [], []
    validation = VALIDATION[metric]
    for axis in COST_AXES:
        points = {s: _summary_point(by_policy[s], axis, metric) for s in sizes}
        # The sizes a researcher would pick: by validation, reported at their test values.
        on = set(
            frontier({s: _summary_point(by_policy[s], axis, validation) for s in sizes}, higher)
        )
        axes.append(
            AxisFrontier(
                axis,
                sorted(
                    (FrontierPoint(s, c, v, s in on) for s, (c, v) in points.items()),
                    key=lambda p: (p.cost, p.label),
                ),
            )
        )
        per_seed: dict[int, dict[str, Point]] = {}
        per_seed_val: dict[int, dict[str, Point]] = {}
        for s in sizes:
            for r in by_policy[s]:
                per_seed.setdefault(r.seed, {})[s] = (r.value(axis), r.value(metric))
                per_seed_val.setdefault(r.seed, {})[s] = (r.value(axis), r.value(validation))
        everyone = {
            **points,
            **{p: _summary_point(by_policy[p], axis, metric) for p in policies},
        }
        for p in policies:
            cost, value = everyone[p]
            others = {k: v for k, v in everyone.items() if k != p}
            gap = frontier_gap(
                {r.seed: (r.value(axis), r.value(metric)) for r in by_policy[p]},
                per_seed,
                higher,
                experiment.confidence,
                experiment.resamples,
                experiment.bootstrap_seed,
                chosen_by=per_seed_val,
            )
            verdicts.append(
                FrontierVerdict(
                    p, axis, cost, value, dominators((cost, value), others, higher), gap
                )
            )
    return TaskFrontier(task, metric, higher, axes, verdicts)


def frontier_section(
    experiment: Experiment,
    results: Sequence[CellResult],
    policies: Sequence[str],
    metrics: Mapping[str, str] | None = None,
) -> list[TaskFrontier]:
    """One :class:`TaskFrontier` per task that has finished sweep cells, policies in
    ``policies`` order; ``metrics``: task label -> its metric (default: accuracy)."""
    sweep = [size.label for size in experiment.sweep]
    if not sweep:
        return []
    out = []
    for task in experiment.tasks:
        by_policy: dict[str, list[CellResult]] = {p: [] for p in policies}
        for r in results:
            if r.task == task.label and r.policy in by_policy:
                by_policy[r.policy].append(r)
        if any(by_policy.get(s) for s in sweep):
            metric = (metrics or {}).get(task.label, ACCURACY)
            out.append(_task_frontier(experiment, task.label, metric, by_policy, sweep))
    return out
