"""The results of a comparison: the robust summary of what the finished cells contribute
(each read by :mod:`esper_core.compare.cell_result`).

Per task and policy, each metric gets its interquartile mean over seeds with a
percentile-bootstrap confidence interval; with several tasks also a row over all tasks
whose bootstrap is stratified by task. Runs are ranked in each task's metric
(:mod:`esper_core.compare.metric`: test loss for a language model, test accuracy
otherwise): against a baseline policy, the probability P(X better than Y) is reported with
its own interval and the paired wins, ties and losses of runs from the same start. Paired
differences (same task and seed, the policy's run minus the other's, in the metric's own
units, wins counted in its direction) are reported against the baseline and against the
policy's own static-final architecture, and each row says on which cost axis (parameters
in the forward pass, training FLOPs) another policy of the task dominates it. With the
``size-sweep`` baseline, the ``frontier`` section says where every policy stands against
the sweep's frontier (:mod:`esper_core.compare.frontier_results`).

Schema versions: 10 added ``failures``, the arms whose runs did not train on some seed
(:mod:`esper_core.compare.stalls`; a verdict against one is unresolved), each cell's
final validation values, and ``cautions``, what the design lacks for a claim (fewer than
5 evaluation or tuning seeds); 9 added ``training_groups``, each method trained in several runs across
them (:mod:`esper_core.compare.training_runs`); 7 added ``no_growth``, the sentence saying that no arm that can grow
did, and why (:mod:`esper_core.compare.no_growth`), and each cell's ``seeds_germinated``
and ``growth_note``; 6 ranks runs in the task's metric: ``metrics`` (task -> metric), each
row's ``metric``, and ``higher_is_better`` on each paired difference; a language model's
``improvement`` (P, wins, ties, losses) and paired wins were in accuracy before (and a
paired difference of the loss or the FLOPs counted a higher value as a win); 5 added
``tuning``, the search of each arm's recipe on the tuning seeds and what it chose
(:mod:`esper_core.compare.tuning_results`; null: the arms were not tuned); 4 added
``paths``, each grown run's path in cost and metric
(:mod:`esper_core.compare.growth_paths`); 3 ``frontier`` (empty without a size sweep); 2
the cost axes. Older results load with what they lack empty (or accuracy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
from attrs import frozen

from esper_core.compare.cell_result import CellResult, read_cell
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.frontier import TaskFrontier
from esper_core.compare.frontier_results import frontier_section
from esper_core.compare.growth_paths import GrowthPath, growth_paths
from esper_core.compare.metric import ACCURACY, LOSS, common, higher_is_better, oriented
from esper_core.compare.no_growth import can_grow, no_growth
from esper_core.compare.paired import PairedDifference, paired_difference, same_seed
from esper_core.compare.pareto import COST_AXES, dominated
from esper_core.compare.stalls import ArmFailure, arm_failures
from esper_core.compare.static_final import no_twins, static_label
from esper_core.compare.stats import improvement_interval, iqm_interval
from esper_core.compare.training_runs import TrainingGroupResult, training_group_results
from esper_core.compare.tuning_results import TuningResults
from esper_core.converter import structure

RESULTS_SCHEMA_VERSION = 11  # 10: failures (arms that did not train) and cautions; 11: tuning edges
# The fewest seeds a claim rests on (docs/growth.md, the tuning rule): fewer are reported.
MIN_CLAIM_SEEDS = 5


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
# Metrics of the paired differences against the baseline and the static final architecture.
PAIRED_METRICS = (ACCURACY, LOSS, "train_flops")


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
    same or worse than the baseline's run from the identical start. "Beats" is in the
    metric's direction (a lower test loss); ``metric`` is ``"mixed"`` for a row pooled
    over tasks of different metrics, each task then ranked in its own."""

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
    paired: list[PairedDifference] = attrs.field(factory=list)
    dominated: list[str] = attrs.field(factory=list)  # cost axes where another policy wins
    # What the row is ranked by: its task's metric (MIXED: pooled over tasks of several).
    metric: str = ACCURACY

    def versus(self, against: str, metric: str | None = None) -> PairedDifference | None:
        """The paired difference against ``against`` in ``metric`` (default: the row's)."""
        wanted = metric or self.metric
        return next((d for d in self.paired if d.against == against and d.metric == wanted), None)


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
    metrics: dict[str, str] = attrs.field(factory=dict)  # task -> metric its runs are ranked by
    # No arm that can grow kept a seed: that, and why (None: one grew, or none can).
    no_growth: str | None = None
    # Each method trained in several runs, per task, across them (none: no such method).
    training_groups: list[TrainingGroupResult] = attrs.field(factory=list)
    # Arms with runs that did not train (diverged or stalled), and the design's gaps.
    failures: list[ArmFailure] = attrs.field(factory=list)
    cautions: list[str] = attrs.field(factory=list)

    def row(self, task: str | None, policy: str) -> ResultRow | None:
        return next((r for r in self.rows if r.task == task and r.policy == policy), None)

    def metric(self, task: str | None) -> str:
        """The metric of a task (None: of all tasks, :data:`MIXED` if they differ)."""
        if task is not None:
            return self.metrics.get(task, ACCURACY)
        return common(self.metric(t) for t in self.tasks)


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
    metrics: Mapping[str, str],
    pooled: bool,
) -> ResultRow | None:
    groups = [by_cell.get((t, policy), []) for t in tasks]
    if any(not g for g in groups):
        return None
    summaries = {
        m.key: _metric([[c.value(m.key) for c in g] for g in groups], experiment) for m in METRICS
    }
    ranked_by = [metrics[t] for t in tasks]
    row_metric = common(ranked_by)
    improvement = None
    baseline = experiment.baseline
    if baseline is not None:
        base = [by_cell.get((t, baseline), []) for t in tasks]
        if all(base):
            # Each task in its own metric, turned so that higher is better: P(X > Y) of
            # the turned values is P(the policy's run is the better one).
            pairs = [
                ([oriented(c.value(m), m) for c in g], [oriented(c.value(m), m) for c in b])
                for g, b, m in zip(groups, base, ranked_by)
            ]
            interval = improvement_interval(
                pairs, experiment.confidence, experiment.resamples, experiment.bootstrap_seed
            )
            wins, ties, losses = same_seed(groups, base, ranked_by)
            improvement = Improvement(
                baseline,
                row_metric,
                interval.estimate,
                interval.low,
                interval.high,
                wins=wins,
                ties=ties,
                losses=losses,
            )
    paired = []
    for against in [a for a in (baseline, static_label(policy)) if a and a != policy]:
        others = [by_cell.get((t, against), []) for t in tasks]
        if not all(others):
            continue
        for metric in PAIRED_METRICS:
            difference = paired_difference(
                groups,
                others,
                against,
                metric,
                experiment.confidence,
                experiment.resamples,
                experiment.bootstrap_seed,
            )
            if difference is not None:
                paired.append(difference)
    return ResultRow(
        None if pooled else tasks[0],
        policy,
        sum(len(g) for g in groups),
        summaries,
        improvement,
        paired=paired,
        metric=row_metric,
    )


def _mark_dominated(rows: list[ResultRow]) -> list[ResultRow]:
    """Each task's rows with the cost axes on which another policy dominates them, in the
    task's metric."""
    out = []
    for row in rows:
        same = [r for r in rows if r.task == row.task and r.task is not None]
        axes = [
            axis
            for axis in COST_AXES
            if row.policy
            in dominated(
                {r.policy: (r.metrics[axis].mean, r.metrics[r.metric].iqm) for r in same},
                higher_is_better(row.metric),
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
    metrics: Mapping[str, str] | None = None,
) -> ComparisonResults:
    """Every finished cell read back and summarised; ``metrics``: task label -> the metric
    its runs are ranked by, everywhere (:func:`esper_core.compare.metric.task_metrics`;
    default: test accuracy)."""
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
    ranked_by = {t: (metrics or {}).get(t, ACCURACY) for t in tasks}
    policies = policy_order(experiment, cells)
    rows = [
        row
        for t in tasks
        for p in policies
        if (row := _row(experiment, by_cell, [t], p, ranked_by, False))
    ]
    rows = _mark_dominated(rows)
    if len(tasks) > 1:
        rows += [
            row for p in policies if (row := _row(experiment, by_cell, tasks, p, ranked_by, True))
        ]
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
        frontier=frontier_section(experiment, results, policies, ranked_by),
        paths=growth_paths(experiment, cells_sorted, ranked_by),
        metrics=ranked_by,
        no_growth=no_growth(can_grow(experiment), cells_sorted),
        training_groups=training_group_results(experiment, results, ranked_by),
        failures=arm_failures(cells_sorted, ranked_by, experiment.stall),
        cautions=cautions(experiment) + no_twins(experiment, cells_sorted),
    )


def cautions(experiment: Experiment) -> list[str]:
    """What the design lacks for a claim: too few evaluation seeds, or tuning seeds."""
    out = []
    if len(experiment.seeds) < MIN_CLAIM_SEEDS:
        out.append(
            f"only {len(experiment.seeds)} evaluation random seed"
            f"{'s' if len(experiment.seeds) > 1 else ''}: too few for a claim (intervals from "
            f"fewer than {MIN_CLAIM_SEEDS} are not to be trusted; set seeds = 10)"
        )
    tuning = experiment.tuning
    if tuning is not None and len(tuning.seeds) < MIN_CLAIM_SEEDS:
        out.append(
            f"only {len(tuning.seeds)} tuning random seeds: the tuning rule (docs/growth.md) asks "
            f"for at least {MIN_CLAIM_SEEDS}, so that a rate that stalls on some random seeds is seen"
        )
    return out


def load_results(path: Path) -> ComparisonResults:
    return structure(json.loads(path.read_text(encoding="utf-8")), ComparisonResults)
