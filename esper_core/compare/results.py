"""The results of a comparison: what each finished cell contributes and the robust summary.

Per task and policy, each metric gets its interquartile mean over seeds with a
percentile-bootstrap confidence interval; with several tasks also a row over all tasks
whose bootstrap is stratified by task. Against a baseline policy, the probability of
improvement P(X > Y) of the final test accuracy is reported with its own interval and
the paired wins, ties and losses of runs from the same start. Paired differences (same
task and seed) are reported against the baseline and against the policy's own
static-final architecture, and each row says on which cost axis (parameters in the
forward pass, training FLOPs) another policy of the task dominates it. With the
``size-sweep`` baseline, the ``frontier`` section says where every policy stands against
the sweep's frontier (:mod:`esper_core.compare.frontier_results`).

Schema versions: 5 added ``tuning``, the search of each arm's recipe on the tuning seeds
and what it chose (:mod:`esper_core.compare.tuning_results`; null: the arms were not
tuned); 4 added ``paths``, each grown run's path in cost and metric
(:mod:`esper_core.compare.growth_paths`); 3 ``frontier`` (empty without a size sweep); 2
the cost axes. Older results load with what they lack empty.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import attrs
from attrs import frozen

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.frontier import TaskFrontier
from esper_core.compare.frontier_results import frontier_section
from esper_core.compare.growth_paths import GrowthPath, growth_paths
from esper_core.compare.pareto import COST_AXES, dominated
from esper_core.compare.static_final import static_label
from esper_core.compare.stats import improvement_interval, iqm_interval
from esper_core.compare.tuning_results import TuningResults
from esper_core.converter import structure
from esper_core.errors import RunDirError
from esper_core.run.run_dir import SUMMARY

RESULTS_SCHEMA_VERSION = 5


@frozen
class Metric:
    key: str  # the CellResult field
    title: str
    unit: str
    digits: int
    short: str  # column header in the terminal


METRICS = (
    Metric("final_test_acc", "final test accuracy", "%", 2, "test acc %"),
    Metric("final_test_loss", "final test loss", "", 4, "test loss"),
    Metric("params_forward", "parameters in the forward pass", "", 0, "params fwd"),
    Metric("params_held", "parameters held", "", 0, "params held"),
    Metric("train_flops", "training FLOPs", "", 3, "train FLOPs"),
    Metric("params_added", "parameters added", "", 0, "params added"),
    Metric("seeds_fossilized", "seeds fossilized", "", 1, "fossilized"),
    Metric("seeds_pruned", "seeds pruned", "", 1, "pruned"),
    Metric("wall_time", "wall time", "s", 1, "wall s"),
)
METRIC = {m.key: m for m in METRICS}
IMPROVEMENT_METRIC = "final_test_acc"  # higher is better
# Metrics of the paired differences against the baseline and the static final architecture.
PAIRED_METRICS = (IMPROVEMENT_METRIC, "final_test_loss", "train_flops")


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
    final_test_loss: float = 0.0
    params_forward: float = 0.0  # host + seeds blended in at the end
    params_held: float = 0.0  # host + every seed held at the end
    train_flops: float = 0.0  # forward + backward FLOPs of training (0: not recorded)

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
class PairedDifference:
    """The policy's run minus ``against``'s run from the same task and seed, on
    ``metric``: IQM of the differences with a bootstrap CI, their mean, and how many
    pairs the policy won, tied and lost."""

    against: str
    metric: str
    n: int
    iqm: float
    low: float | None
    high: float | None
    mean: float
    wins: int
    ties: int
    losses: int


@frozen
class ResultRow:
    task: str | None  # None: all tasks, bootstrap stratified over tasks
    policy: str
    n: int
    metrics: dict[str, MetricResult]
    improvement: Improvement | None = None
    paired: list[PairedDifference] = attrs.field(factory=list)
    dominated: list[str] = attrs.field(factory=list)  # cost axes where another policy wins

    def versus(self, against: str, metric: str = IMPROVEMENT_METRIC) -> PairedDifference | None:
        return next((d for d in self.paired if d.against == against and d.metric == metric), None)


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
    frontier: list[TaskFrontier] = attrs.field(factory=list)  # tasks with a size sweep
    paths: list[GrowthPath] = attrs.field(factory=list)  # grown runs, in cells order
    tuning: TuningResults | None = None  # None: every arm ran the shared config's recipe

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
        added = float(summary["params_added_mean"] or 0.0)
        host = float(summary.get("host_params") or 0.0)
        (episode,) = summary["episodes"]
        return CellResult(
            task=cell.task,
            policy=cell.policy,
            seed=cell.seed,
            final_test_acc=float(summary["final_test_acc_mean"]),
            params_added=added,
            seeds_fossilized=int(summary["seeds_fossilized"]),
            seeds_pruned=int(summary["seeds_pruned"]),
            wall_time=float(summary["wall_time"]),
            run_dir=str(directory),
            final_test_loss=float(episode["final_test_loss"]),
            # Summaries written before the cost axes existed: every seed counted.
            params_forward=float(summary.get("params_forward_mean") or host + added),
            params_held=float(summary.get("params_held_mean") or host + added),
            train_flops=float(summary.get("train_flops_mean") or 0.0),
        )
    except (KeyError, TypeError, ValueError) as exc:  # also: not exactly one episode
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
            same_seed = _paired(groups, base, baseline, IMPROVEMENT_METRIC, experiment)
            improvement = Improvement(
                baseline,
                IMPROVEMENT_METRIC,
                interval.estimate,
                interval.low,
                interval.high,
                wins=same_seed.wins if same_seed else 0,
                ties=same_seed.ties if same_seed else 0,
                losses=same_seed.losses if same_seed else 0,
            )
    paired = []
    for against in [a for a in (baseline, static_label(policy)) if a and a != policy]:
        others = [by_cell.get((t, against), []) for t in tasks]
        if not all(others):
            continue
        for metric in PAIRED_METRICS:
            difference = _paired(groups, others, against, metric, experiment)
            if difference is not None:
                paired.append(difference)
    return ResultRow(
        None if pooled else tasks[0],
        policy,
        sum(len(g) for g in groups),
        metrics,
        improvement,
        paired=paired,
    )


def _paired(
    groups: Sequence[Sequence[CellResult]],
    others: Sequence[Sequence[CellResult]],
    against: str,
    metric: str,
    experiment: Experiment,
) -> PairedDifference | None:
    """Run minus run of the same (task, seed), stratified by task for the interval."""
    other = {(c.task, c.seed): c.value(metric) for o in others for c in o}
    diffs = [
        [c.value(metric) - other[c.task, c.seed] for c in g if (c.task, c.seed) in other]
        for g in groups
    ]
    diffs = [d for d in diffs if d]
    if not diffs:
        return None
    interval = iqm_interval(
        diffs, experiment.confidence, experiment.resamples, experiment.bootstrap_seed
    )
    flat = [d for g in diffs for d in g]
    return PairedDifference(
        against,
        metric,
        len(flat),
        interval.estimate,
        interval.low,
        interval.high,
        sum(flat) / len(flat),
        wins=sum(d > 0 for d in flat),
        ties=sum(d == 0 for d in flat),
        losses=sum(d < 0 for d in flat),
    )


def _mark_dominated(rows: list[ResultRow]) -> list[ResultRow]:
    """Each task's rows with the cost axes on which another policy dominates them."""
    out = []
    for row in rows:
        same = [r for r in rows if r.task == row.task and r.task is not None]
        axes = [
            axis
            for axis in COST_AXES
            if row.policy
            in dominated(
                {r.policy: (r.metrics[axis].mean, r.metrics[IMPROVEMENT_METRIC].iqm) for r in same}
            )
        ]
        out.append(attrs.evolve(row, dominated=axes))
    return out


def policy_order(experiment: Experiment, cells: Sequence[Cell]) -> list[str]:
    """The experiment's policies, each followed by its static-final baseline if it has one,
    then the sizes of the sweep."""
    present = {c.policy for c in cells}
    out = []
    for p in experiment.policies:
        out.append(p.label)
        if static_label(p.label) in present:
            out.append(static_label(p.label))
    return out + [s.label for s in experiment.sweep if s.label in present]


def aggregate(
    experiment: Experiment,
    cells: Sequence[Cell],
    root: Path,
    frontier_metrics: dict[str, str] | None = None,
) -> ComparisonResults:
    """Every finished cell read back and summarised; ``frontier_metrics``: task label ->
    the metric of its size-sweep frontier (default: test accuracy)."""
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
    policies = policy_order(experiment, cells)
    rows = [
        row for t in tasks for p in policies if (row := _row(experiment, by_cell, [t], p, False))
    ]
    rows = _mark_dominated(rows)
    if len(tasks) > 1:
        rows += [row for p in policies if (row := _row(experiment, by_cell, tasks, p, True))]
    cells_sorted = sorted(
        results, key=lambda r: (tasks.index(r.task), policies.index(r.policy), r.seed)
    )
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
        cells=cells_sorted,
        missing=missing,
        frontier=frontier_section(experiment, results, policies, frontier_metrics),
        paths=growth_paths(experiment, cells_sorted, frontier_metrics),
    )


def load_results(path: Path) -> ComparisonResults:
    return structure(json.loads(path.read_text(encoding="utf-8")), ComparisonResults)
