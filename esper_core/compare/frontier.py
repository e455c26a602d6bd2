"""The empirical frontier of a size sweep, and where each policy stands against it.

Pure functions over numbers (no cells, no files), so the verdicts are tested, not read off
a plot. A point is ``(cost, value)``; ``higher_is_better`` says the metric's direction
(test accuracy: higher; test loss: lower).

- :func:`frontier`: the non-dominated points, sorted by cost; along it the value strictly
  improves with the cost (a point another one matches or beats for at most its cost is
  off it; of identical points the first is kept).
- :func:`frontier_curve` and :func:`frontier_value`: the frontier at a cost, interpolated
  linearly in log(cost) between neighbouring frontier points (sizes span orders of
  magnitude of parameters and FLOPs, and accuracy grows roughly with the log of size).
  Past the last frontier point it stays at the best value up to the sweep's largest cost
  (a larger size that did worse lowers nothing). Outside the sweep's cost range it is
  ``None``, "outside the sweep": no extrapolation.
- :func:`dominators`: which points have at most a point's cost and at least its value,
  better on one of the two.
- :func:`frontier_gap`: a policy's value minus the frontier at the policy's cost, paired by
  seed: for each seed the frontier is built from that seed's sweep runs only. The IQM of
  the differences gets a percentile-bootstrap CI over seeds
  (:func:`esper_core.compare.stats.iqm_interval`); seeds where the policy's cost is
  outside that seed's sweep are counted, not used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from attrs import field, frozen

from esper_core.compare.stats import iqm_interval

Point = tuple[float, float]  # (cost, value)
# Costs equal up to float noise count as equal (a policy's host and a sweep size alike).
COST_TOLERANCE = 1e-9


def _better(a: float, b: float, higher_is_better: bool) -> bool:
    return a > b if higher_is_better else a < b


def _at_least(a: float, b: float, higher_is_better: bool) -> bool:
    return a >= b if higher_is_better else a <= b


def dominators(
    point: Point, others: Mapping[str, Point], higher_is_better: bool = True
) -> list[str]:
    """The names of ``others`` that dominate ``point``: cost at most as high, value at least
    as good, and strictly better on one of the two (an identical point dominates nothing).
    A cost of 0 was not recorded: such a point neither dominates nor is dominated."""
    cost, value = point
    if cost <= 0:
        return []
    return [
        name
        for name, (c, v) in others.items()
        if 0 < c <= cost
        and _at_least(v, value, higher_is_better)
        and (c < cost or _better(v, value, higher_is_better))
    ]


def frontier(points: Mapping[str, Point], higher_is_better: bool = True) -> list[str]:
    """The names of the non-dominated points with a positive, finite cost, by cost."""
    usable = {
        n: p for n, p in points.items() if p[0] > 0 and math.isfinite(p[0]) and math.isfinite(p[1])
    }
    kept: dict[Point, str] = {}
    for name, point in usable.items():
        if not dominators(point, usable, higher_is_better):
            kept.setdefault(point, name)  # identical points: the first
    return [kept[p] for p in sorted(kept)]


def frontier_curve(points: Mapping[str, Point], higher_is_better: bool = True) -> list[Point]:
    """The frontier's points by cost, held flat up to the sweep's largest cost: a larger size
    that does worse (off the frontier) does not lower what the sweep reaches at that cost,
    it only makes the range of costs the sweep covers."""
    curve = [points[name] for name in frontier(points, higher_is_better)]
    largest = max((c for c, _ in points.values() if c > 0 and math.isfinite(c)), default=0.0)
    if curve and largest > curve[-1][0]:
        curve.append((largest, curve[-1][1]))
    return curve


def frontier_value(curve: Sequence[Point], cost: float) -> float | None:
    """The frontier at ``cost``: linear in log(cost) between neighbouring points of
    ``curve`` (as :func:`frontier_curve` gives it); ``None`` outside its cost range."""
    if not curve or cost <= 0 or not math.isfinite(cost):
        return None
    costs = np.array([c for c, _ in curve], dtype=float)
    lo, hi = costs[0] * (1 - COST_TOLERANCE), costs[-1] * (1 + COST_TOLERANCE)
    if not lo <= cost <= hi:
        return None
    cost = min(max(cost, costs[0]), costs[-1])
    return float(np.interp(np.log(cost), np.log(costs), [v for _, v in curve]))


@frozen
class FrontierGap:
    """A policy's value minus the frontier at its cost, paired by seed.

    ``n`` seeds had the policy's cost inside that seed's sweep (``outside`` did not);
    ``iqm`` [``low``, ``high``] and ``mean`` are over those differences (``None`` when
    there is none); ``better``/``ties``/``worse`` count the seeds by the metric's direction.
    """

    n: int
    outside: int
    iqm: float | None = None
    low: float | None = None
    high: float | None = None
    mean: float | None = None
    better: int = 0
    ties: int = 0
    worse: int = 0


def frontier_gap(
    policy: Mapping[int, Point],
    sweep: Mapping[int, Mapping[str, Point]],
    higher_is_better: bool = True,
    confidence: float = 0.95,
    resamples: int = 2000,
    bootstrap_seed: int = 0,
) -> FrontierGap:
    """``policy``: seed -> (cost, value) of its run; ``sweep``: seed -> size -> (cost, value)
    of that seed's sweep runs. A seed without sweep runs counts as outside."""
    diffs: list[float] = []
    for seed, (cost, value) in sorted(policy.items()):
        reference = frontier_value(frontier_curve(sweep.get(seed, {}), higher_is_better), cost)
        if reference is not None and math.isfinite(value):
            diffs.append(value - reference)
    outside = len(policy) - len(diffs)
    if not diffs:
        return FrontierGap(0, outside)
    interval = iqm_interval([diffs], confidence, resamples, bootstrap_seed)
    sign = 1.0 if higher_is_better else -1.0
    return FrontierGap(
        len(diffs),
        outside,
        interval.estimate,
        interval.low,
        interval.high,
        float(np.mean(diffs)),
        better=sum(sign * d > 0 for d in diffs),
        ties=sum(d == 0 for d in diffs),
        worse=sum(sign * d < 0 for d in diffs),
    )


# ---------------------------------------------------------------- the results section


@frozen
class FrontierPoint:
    """A sweep size on one cost axis: mean cost and IQM value over seeds."""

    label: str
    cost: float
    value: float
    on_frontier: bool


@frozen
class AxisFrontier:
    axis: str  # a cost axis (CellResult field): params_forward or train_flops
    points: list[FrontierPoint]  # every sweep size, by cost


@frozen
class FrontierVerdict:
    """One policy on one cost axis: its point (mean cost, IQM value), who dominates it
    (sweep sizes and other policies of the task, by point estimates) and its paired gap to
    the sweep's frontier at its own cost."""

    policy: str
    axis: str
    cost: float
    value: float
    dominated_by: list[str]
    gap: FrontierGap

    @property
    def dominated(self) -> bool:
        return bool(self.dominated_by)


@frozen
class TaskFrontier:
    task: str
    metric: str  # CellResult field: final_test_acc or final_test_loss
    higher_is_better: bool
    axes: list[AxisFrontier]
    verdicts: list[FrontierVerdict] = field(factory=list)

    def verdict(self, policy: str, axis: str) -> FrontierVerdict | None:
        return next((v for v in self.verdicts if v.policy == policy and v.axis == axis), None)
