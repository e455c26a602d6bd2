"""The empirical frontier of a sweep, and where each policy stands against it.

Pure functions over numbers (no cells, no files), so the verdicts are tested, not read off
a plot. A point is ``(cost, value)``; ``higher_is_better`` says the metric's direction
(test accuracy: higher; test loss: lower). A sweep point is one static model: a host size
trained for one length, so on the FLOPs axis a longer run is simply a costlier point.

The frontier is the **monotone hull** of the sweep in log(cost): the least concave (for
accuracy; convex for loss) function of log(cost), never worse at a higher cost, that is at
least as good as every sweep point, from the sweep's cheapest point to its costliest. It
is what a researcher gets at a budget by picking the best static model for it, allowing
for sizes between the ones swept: a size below the chord of its neighbours, or a bigger
size that did worse, lowers nothing. So adding a point to a sweep can only raise (improve)
the frontier, never lower it; joining every non-dominated point instead let a size just
below the chord drag the frontier down around it and turn a policy's verdict.

- :func:`frontier`: the hull's vertices, sorted by cost (a point exactly on a hull edge
  counts: the frontier passes through it; of identical points the first is kept).
- :func:`frontier_curve` and :func:`frontier_value`: the frontier at a cost, linear in
  log(cost) between hull vertices (sizes span orders of magnitude of parameters and FLOPs,
  and accuracy grows roughly with the log of size). Past the last vertex it stays at the
  best value up to the sweep's largest cost. Outside the sweep's cost range it is
  ``None``, "outside the sweep": no extrapolation.
- :func:`dominators`: which points have at most a point's cost and at least its value,
  better on one of the two.
- :func:`frontier_gap`: a policy's value minus the frontier at the policy's cost, paired by
  seed: for each seed the frontier is built from that seed's sweep runs only, its sizes
  chosen by their validation values and joined at their test values (choosing them by
  test values would pick the frontier with the metric it then judges: in a probe where
  the true gap is 0, a bias of -0.09 points). The IQM of
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
# A point this close to a hull edge (relative to the values' scale) is on it: float noise
# in a mean must not decide whether a size is drawn as on the frontier.
ON_EDGE_TOLERANCE = 1e-12


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


def _usable(points: Mapping[str, Point]) -> dict[str, Point]:
    return {
        n: p for n, p in points.items() if p[0] > 0 and math.isfinite(p[0]) and math.isfinite(p[1])
    }


def _non_dominated(usable: Mapping[str, Point], higher_is_better: bool) -> list[str]:
    """The Pareto staircase by cost: along it the value strictly improves with the cost."""
    kept: dict[Point, str] = {}
    for name, point in usable.items():
        if not dominators(point, usable, higher_is_better):
            kept.setdefault(point, name)  # identical points: the first
    staircase: list[Point] = []
    for point in sorted(kept):
        # Costs equal up to float noise are one cost: the better point (the later) stands.
        if staircase and point[0] <= staircase[-1][0] * (1 + COST_TOLERANCE):
            staircase.pop()
        staircase.append(point)
    return [kept[p] for p in staircase]


def _below_chord(a: Point, b: Point, c: Point, scale: float) -> bool:
    """Whether ``b`` lies strictly below the chord from ``a`` to ``c`` in (log cost, value),
    values oriented so that higher is better."""
    xa, xb, xc = (math.log(p[0]) for p in (a, b, c))
    chord = a[1] + (c[1] - a[1]) * (xb - xa) / (xc - xa)
    return chord - b[1] > ON_EDGE_TOLERANCE * scale


def frontier(points: Mapping[str, Point], higher_is_better: bool = True) -> list[str]:
    """The names of the points the monotone hull passes through (positive, finite cost),
    by cost.

    The upper hull (in log cost, values oriented so that higher is better) of the
    non-dominated points: their last point is the best value, so the hull rises all along
    and no dominated point can reach it."""
    usable = _usable(points)
    staircase = _non_dominated(usable, higher_is_better)
    sign = 1.0 if higher_is_better else -1.0
    oriented = {n: (usable[n][0], sign * usable[n][1]) for n in staircase}
    scale = max((abs(v) for _, v in oriented.values()), default=0.0) or 1.0
    hull: list[str] = []
    for name in staircase:  # Andrew's monotone chain, upper half, on increasing cost
        while len(hull) >= 2 and _below_chord(
            oriented[hull[-2]], oriented[hull[-1]], oriented[name], scale
        ):
            hull.pop()
        hull.append(name)
    return hull


def frontier_curve(
    points: Mapping[str, Point],
    higher_is_better: bool = True,
    vertices: Sequence[str] | None = None,
) -> list[Point]:
    """The frontier's vertices by cost, held flat up to the sweep's largest cost: a larger
    point that does worse (off the frontier) does not lower what the sweep reaches at that
    cost, it only makes the range of costs the sweep covers. ``vertices``: the names the
    frontier passes through, chosen elsewhere (by validation values, which a researcher
    picks a size by); the curve then joins their values in ``points`` (test values), so
    it is measured, not selected, with the evaluation metric. Default: the hull of
    ``points`` itself."""
    chosen = frontier(points, higher_is_better) if vertices is None else vertices
    curve = [points[n] for n in chosen if n in points and all(map(math.isfinite, points[n]))]
    curve.sort(key=lambda p: p[0])
    # A point without a finite value (a run that diverged) was still trained at its cost.
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
    chosen_by: Mapping[int, Mapping[str, Point]] | None = None,
) -> FrontierGap:
    """``policy``: seed -> (cost, value) of its run; ``sweep``: seed -> size -> (cost, value)
    of that seed's sweep runs. A seed without sweep runs counts as outside. ``chosen_by``:
    the same seed -> size -> (cost, validation value); the sizes the frontier passes
    through are then chosen by validation and joined at their ``sweep`` values (without
    it, by the values themselves, which picks the frontier with the metric it judges)."""
    diffs: list[float] = []
    for seed, (cost, value) in sorted(policy.items()):
        runs = sweep.get(seed, {})
        vertices = None
        if chosen_by is not None:
            vertices = frontier(chosen_by.get(seed, {}), higher_is_better)
        reference = frontier_value(frontier_curve(runs, higher_is_better, vertices), cost)
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
    """A sweep point on one cost axis: mean cost and IQM test value over seeds;
    ``on_frontier``: the monotone hull of the sweep's validation values passes through it
    (a researcher picks sizes by validation; the frontier is drawn at their test values)."""

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
