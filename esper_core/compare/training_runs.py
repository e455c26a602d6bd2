"""A learned method across its independent training runs (rliable-style).

A method trained in several runs (:mod:`esper_core.compare.training_group`) has one arm
per trained policy; each arm's row says how well that one policy does over the
evaluation seeds. What the method is worth needs the spread between training runs too:
per task, the IQM of every (training run, evaluation seed) value pooled, with a
*two-level* percentile bootstrap interval: each resample draws the training runs with
replacement, then within each drawn run its evaluation seeds with replacement. A plain
bootstrap of the pooled values would treat the seeds of one trained policy as
independent draws of the method and give too narrow an interval when the runs differ.
The paired difference against the baseline (the run's value minus the baseline's on the
same task and seed) is resampled the same way. Values are in the task's metric
(:mod:`esper_core.compare.metric`), wins counted in its direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from attrs import frozen

from esper_core.compare.metric import higher_is_better, oriented
from esper_core.compare.paired import PairedDifference
from esper_core.compare.stats import IQM_TRIM, Interval, iqm

if TYPE_CHECKING:
    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.experiment import Experiment
    from esper_core.compare.training_group import TrainingGroup

# Values drawn per block of resamples: bounds memory for many runs x seeds x resamples.
_BLOCK = 4_000_000


@frozen
class RunIQM:
    """One training run (one arm): the IQM over its evaluation seeds."""

    arm: str
    n: int
    iqm: float


@frozen
class TrainingGroupResult:
    """A method on one task across its training runs; ``per_run`` lists the runs with a
    finished cell, ``runs`` counts every run of the method."""

    task: str
    label: str
    metric: str
    higher_is_better: bool
    runs: int
    n: int  # (run, seed) values pooled
    per_run: tuple[RunIQM, ...]
    iqm: float
    low: float | None
    high: float | None
    run_min: float
    run_max: float
    versus: PairedDifference | None = None  # against the experiment's baseline


def _iqm_rows(values: np.ndarray) -> np.ndarray:
    """The IQM of each row of finite values, NaN marking where a row is shorter; the
    cut is scipy's ``trim_mean``'s (``int(0.25 * n)`` values at each end)."""
    ordered = np.sort(values, axis=1)  # NaN sort last
    counts = np.sum(~np.isnan(values), axis=1)
    cut = (counts * IQM_TRIM).astype(int)
    position = np.arange(values.shape[1])
    kept = (position >= cut[:, None]) & (position < (counts - cut)[:, None])
    return np.where(kept, ordered, 0.0).sum(axis=1) / (counts - 2 * cut)


def two_level_resamples(runs: Sequence[Sequence[float]], resamples: int, seed: int) -> np.ndarray:
    """The pooled IQM of ``resamples`` two-level resamples of ``runs`` (one sequence of
    seed values per training run): the runs drawn with replacement, then each drawn
    run's values drawn with replacement at its own size."""
    rng = np.random.default_rng(seed)
    sizes = np.array([len(r) for r in runs])
    width = int(sizes.max())
    table = np.full((len(runs), width), np.nan)
    for i, run in enumerate(runs):
        table[i, : len(run)] = run
    drawn = rng.integers(0, len(runs), size=(resamples, len(runs)))
    out = np.empty(resamples)
    block = max(1, _BLOCK // (len(runs) * width))
    for start in range(0, resamples, block):
        chosen = drawn[start : start + block]
        size = sizes[chosen][..., None]  # each drawn run's own seed count
        within = rng.integers(0, size, size=(*chosen.shape, width))
        values = np.where(np.arange(width) < size, table[chosen[..., None], within], np.nan)
        out[start : start + len(chosen)] = _iqm_rows(values.reshape(len(chosen), -1))
    return out


def two_level_interval(
    runs: Sequence[Sequence[float]], confidence: float, resamples: int, seed: int
) -> Interval:
    """IQM of all values pooled, with a two-level percentile bootstrap interval (none
    from a single training run: nothing then says how training runs differ)."""
    estimate = float(iqm([v for r in runs for v in r]))
    if len(runs) < 2:
        return Interval(estimate)
    stats = two_level_resamples(runs, resamples, seed)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high))


def _versus(
    experiment: Experiment,
    runs: Sequence[Sequence[CellResult]],
    baseline: Sequence[CellResult],
    metric: str,
) -> PairedDifference | None:
    other = {c.seed: c.value(metric) for c in baseline}
    diffs = [[c.value(metric) - other[c.seed] for c in r if c.seed in other] for r in runs]
    diffs = [d for d in diffs if d]
    if not diffs or experiment.baseline is None:  # no seed in common
        return None
    interval = two_level_interval(
        diffs, experiment.confidence, experiment.resamples, experiment.bootstrap_seed
    )
    better = [oriented(d, metric) for r in diffs for d in r]
    return PairedDifference(
        experiment.baseline,
        metric,
        len(better),
        interval.estimate,
        interval.low,
        interval.high,
        float(np.mean([d for r in diffs for d in r])),
        wins=sum(d > 0 for d in better),
        ties=sum(d == 0 for d in better),
        losses=sum(d < 0 for d in better),
        higher_is_better=higher_is_better(metric),
    )


def group_result(
    experiment: Experiment,
    group: TrainingGroup,
    task: str,
    metric: str,
    by_arm: Mapping[str, Sequence[CellResult]],
) -> TrainingGroupResult | None:
    """``by_arm``: the task's finished cells of each arm; None without any of the group's."""
    arms = [a for a in group.arms if by_arm.get(a)]
    if not arms:
        return None
    runs = [by_arm[a] for a in arms]
    values = [[c.value(metric) for c in r] for r in runs]
    per_run = tuple(RunIQM(a, len(v), float(iqm(v))) for a, v in zip(arms, values))
    pooled = two_level_interval(
        values, experiment.confidence, experiment.resamples, experiment.bootstrap_seed
    )
    baseline = by_arm.get(experiment.baseline or "")
    # A method against one of its own training runs says nothing about the method.
    versus = None
    if baseline and experiment.baseline not in group.arms:
        versus = _versus(experiment, runs, baseline, metric)
    return TrainingGroupResult(
        task,
        group.label,
        metric,
        higher_is_better(metric),
        len(group.arms),
        sum(len(v) for v in values),
        per_run,
        pooled.estimate,
        pooled.low,
        pooled.high,
        min(r.iqm for r in per_run),
        max(r.iqm for r in per_run),
        versus,
    )


def training_group_results(
    experiment: Experiment, cells: Sequence[CellResult], metrics: Mapping[str, str]
) -> list[TrainingGroupResult]:
    """Every method of several training runs on every task (``metrics``: task -> the
    metric its runs are ranked by), method by method."""
    by_cell: dict[tuple[str, str], list[CellResult]] = {}
    for c in sorted(cells, key=lambda c: c.seed):
        by_cell.setdefault((c.task, c.policy), []).append(c)
    out = []
    for group in experiment.training_groups:
        for task in (t.label for t in experiment.tasks):
            by_arm = {p: cs for (t, p), cs in by_cell.items() if t == task}
            result = group_result(experiment, group, task, metrics[task], by_arm)
            if result is not None:
                out.append(result)
    return out
