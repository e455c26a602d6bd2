"""A learned method across its independent training runs (rliable-style).

A method trained in several runs (:mod:`esper_core.compare.training_group`) has one arm
per trained policy; each arm's row says how well that one policy does over the
evaluation seeds. What the method is worth needs the spread between training runs too:
per task, the IQM of every (training run, evaluation seed) value pooled, with the
*crossed* bootstrap interval of :mod:`esper_core.compare.crossed_bootstrap`: every run is
evaluated on the same seeds, so each resample draws the runs with replacement and one
seed draw that every drawn run shares. The pooled values are those of the seeds every
run finished (``n`` counts them). The paired difference against the baseline (the run's
value minus the baseline's on the same task and seed) is resampled as one crossed table,
so the seed draw applies to the baseline too. Values are in the task's metric
(:mod:`esper_core.compare.metric`), wins counted in its direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from attrs import frozen

from esper_core.compare.crossed_bootstrap import complete_table, crossed_interval
from esper_core.compare.metric import higher_is_better, oriented
from esper_core.compare.paired import PairedDifference
from esper_core.compare.stats import iqm

if TYPE_CHECKING:
    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.experiment import Experiment
    from esper_core.compare.training_group import TrainingGroup


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


def _table(runs: Sequence[Sequence[CellResult]], metric: str, seeds: Sequence[int]) -> np.ndarray:
    """Runs x ``seeds`` values of ``metric``, NaN where a run has no finished cell."""
    table = np.full((len(runs), len(seeds)), np.nan)
    column = {s: j for j, s in enumerate(seeds)}
    for i, run in enumerate(runs):
        for c in run:
            if c.seed in column:
                table[i, column[c.seed]] = c.value(metric)
    return table


def _versus(
    experiment: Experiment, table: np.ndarray, baseline: np.ndarray, metric: str
) -> PairedDifference | None:
    """The crossed table of differences against the baseline on the same seeds."""
    diffs = complete_table(list(table - baseline[None, :]))
    if diffs.size == 0 or experiment.baseline is None:  # no seed in common
        return None
    interval = crossed_interval(
        list(diffs), experiment.confidence, experiment.resamples, experiment.bootstrap_seed
    )
    better = [oriented(float(d), metric) for d in diffs.ravel()]
    return PairedDifference(
        experiment.baseline,
        metric,
        len(better),
        interval.estimate,
        interval.low,
        interval.high,
        float(diffs.mean()),
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
    seeds = sorted({c.seed for r in runs for c in r})
    table = _table(runs, metric, seeds)
    per_run = tuple(
        RunIQM(a, len(r), float(iqm([c.value(metric) for c in r]))) for a, r in zip(arms, runs)
    )
    crossed = complete_table(list(table))
    if crossed.size == 0:
        return None  # the runs share no finished seed: no crossed table to pool
    pooled = crossed_interval(
        list(crossed), experiment.confidence, experiment.resamples, experiment.bootstrap_seed
    )
    baseline = by_arm.get(experiment.baseline or "")
    # A method against one of its own training runs says nothing about the method.
    versus = None
    if baseline and experiment.baseline not in group.arms:
        versus = _versus(experiment, table, _table([baseline], metric, seeds)[0], metric)
    return TrainingGroupResult(
        task,
        group.label,
        metric,
        higher_is_better(metric),
        len(group.arms),
        int(crossed.size),
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
