"""The results of a comparison: what each finished cell contributes and the robust summary.

Per task and policy, each metric gets its interquartile mean over seeds with a
percentile-bootstrap confidence interval; with several tasks also a row over all tasks
whose bootstrap is stratified by task. Against a baseline policy, the probability of
improvement P(X > Y) of the final test accuracy is reported with its own interval and
the paired wins, ties and losses of runs from the same start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from attrs import frozen

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.stats import improvement_interval, iqm_interval
from esper_core.converter import structure
from esper_core.errors import RunDirError
from esper_core.run.run_dir import SUMMARY

RESULTS_SCHEMA_VERSION = 1


@frozen
class Metric:
    key: str  # the CellResult field
    title: str
    unit: str
    digits: int
    short: str  # column header in the terminal


METRICS = (
    Metric("final_test_acc", "final test accuracy", "%", 2, "test acc %"),
    Metric("params_added", "parameters added", "", 0, "params added"),
    Metric("seeds_fossilized", "seeds fossilized", "", 1, "fossilized"),
    Metric("seeds_pruned", "seeds pruned", "", 1, "pruned"),
    Metric("wall_time", "wall time", "s", 1, "wall s"),
)
METRIC = {m.key: m for m in METRICS}
IMPROVEMENT_METRIC = "final_test_acc"  # higher is better


@frozen
class CellResult:
    """What one finished cell contributes, read from its summary.json."""

    task: str
    policy: str
    seed: int
    final_test_acc: float
    params_added: float
    seeds_fossilized: int
    seeds_pruned: int
    wall_time: float
    run_dir: str

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))


@frozen
class MetricResult:
    n: int
    mean: float
    iqm: float
    low: float | None = None
    high: float | None = None


@frozen
class Improvement:
    """P(a run of the policy beats a run of the baseline) on ``metric``, ties counting 1/2,
    and the paired view: on how many (task, seed) pairs the policy's run did better, the
    same or worse than the baseline's run from the identical start."""

    baseline: str
    metric: str
    probability: float
    low: float | None = None
    high: float | None = None
    wins: int = 0
    ties: int = 0
    losses: int = 0


@frozen
class ResultRow:
    task: str | None  # None: all tasks, bootstrap stratified over tasks
    policy: str
    n: int
    metrics: dict[str, MetricResult]
    improvement: Improvement | None = None


@frozen
class ComparisonResults:
    schema_version: int
    tasks: list[str]
    policies: list[str]
    seeds: list[int]
    baseline: str | None
    confidence: float
    resamples: int
    bootstrap_seed: int
    rows: list[ResultRow]
    cells: list[CellResult]
    missing: list[str]  # cell directories without a finished summary

    def row(self, task: str | None, policy: str) -> ResultRow | None:
        return next((r for r in self.rows if r.task == task and r.policy == policy), None)


# ---------------------------------------------------------------- reading cells


def read_cell(cell: Cell, root: Path) -> CellResult | None:
    directory = cell.directory(root)
    if cell_state(directory) is not CellState.COMPLETED:
        return None
    summary = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
    if summary.get("final_test_acc_mean") is None:
        return None
    try:
        return CellResult(
            task=cell.task,
            policy=cell.policy,
            seed=cell.seed,
            final_test_acc=float(summary["final_test_acc_mean"]),
            params_added=float(summary["params_added_mean"] or 0.0),
            seeds_fossilized=int(summary["seeds_fossilized"]),
            seeds_pruned=int(summary["seeds_pruned"]),
            wall_time=float(summary["wall_time"]),
            run_dir=str(directory),
        )
    except (KeyError, TypeError, ValueError) as exc:
        # A finished cell is never run again, so a hand-edited summary must be named.
        raise RunDirError(
            f"{directory / SUMMARY} is damaged ({type(exc).__name__}: {exc}); "
            "delete that run directory to run the cell again"
        ) from None


# ---------------------------------------------------------------- aggregation


def _metric(groups: Sequence[Sequence[float]], experiment: Experiment) -> MetricResult:
    interval = iqm_interval(
        groups, experiment.confidence, experiment.resamples, experiment.bootstrap_seed
    )
    values = [v for g in groups for v in g]
    return MetricResult(
        len(values), sum(values) / len(values), interval.estimate, interval.low, interval.high
    )


def _row(
    experiment: Experiment,
    by_cell: dict[tuple[str, str], list[CellResult]],
    tasks: Sequence[str],
    policy: str,
    pooled: bool,
) -> ResultRow | None:
    groups = [by_cell.get((t, policy), []) for t in tasks]
    if any(not g for g in groups):
        return None
    metrics = {
        m.key: _metric([[c.value(m.key) for c in g] for g in groups], experiment) for m in METRICS
    }
    improvement = None
    baseline = experiment.baseline
    if baseline is not None:
        base = [by_cell.get((t, baseline), []) for t in tasks]
        if all(base):
            pairs = [
                ([c.value(IMPROVEMENT_METRIC) for c in g], [c.value(IMPROVEMENT_METRIC) for c in b])
                for g, b in zip(groups, base)
            ]
            interval = improvement_interval(
                pairs, experiment.confidence, experiment.resamples, experiment.bootstrap_seed
            )
            base_runs = {(c.task, c.seed): c.value(IMPROVEMENT_METRIC) for b in base for c in b}
            diffs = [
                c.value(IMPROVEMENT_METRIC) - base_runs[c.task, c.seed]
                for g in groups
                for c in g
                if (c.task, c.seed) in base_runs
            ]
            improvement = Improvement(
                baseline,
                IMPROVEMENT_METRIC,
                interval.estimate,
                interval.low,
                interval.high,
                wins=sum(d > 0 for d in diffs),
                ties=sum(d == 0 for d in diffs),
                losses=sum(d < 0 for d in diffs),
            )
    return ResultRow(
        None if pooled else tasks[0], policy, sum(len(g) for g in groups), metrics, improvement
    )


def aggregate(experiment: Experiment, cells: Sequence[Cell], root: Path) -> ComparisonResults:
    results: list[CellResult] = []
    missing: list[str] = []
    for cell in cells:
        result = read_cell(cell, root)
        if result is None:
            missing.append(str(cell.directory(root)))
        else:
            results.append(result)
    by_cell: dict[tuple[str, str], list[CellResult]] = {}
    for r in sorted(results, key=lambda r: r.seed):
        by_cell.setdefault((r.task, r.policy), []).append(r)
    tasks = [t.label for t in experiment.tasks]
    policies = [p.label for p in experiment.policies]
    rows = [
        row for t in tasks for p in policies if (row := _row(experiment, by_cell, [t], p, False))
    ]
    if len(tasks) > 1:
        rows += [row for p in policies if (row := _row(experiment, by_cell, tasks, p, True))]
    return ComparisonResults(
        schema_version=RESULTS_SCHEMA_VERSION,
        tasks=tasks,
        policies=policies,
        seeds=list(experiment.seeds),
        baseline=experiment.baseline,
        confidence=experiment.confidence,
        resamples=experiment.resamples,
        bootstrap_seed=experiment.bootstrap_seed,
        rows=rows,
        cells=sorted(
            results, key=lambda r: (tasks.index(r.task), policies.index(r.policy), r.seed)
        ),
        missing=missing,
    )


def load_results(path: Path) -> ComparisonResults:
    return structure(json.loads(path.read_text(encoding="utf-8")), ComparisonResults)
