"""``esper compare``: policies x tasks x seeds, run as cells, summarised robustly.

:func:`compare` validates the experiment, runs the unfinished cells (see
:mod:`esper_core.compare.cells`), then reads every finished cell's ``summary.json`` and writes
into the experiment directory:

- ``results.json``: the rows below and every cell, through the one cattrs converter;
- ``results.md``: the same as Markdown tables;
- ``intervals.png``: the intervals of the main metrics.

Per task and policy, each metric gets its interquartile mean over seeds with a
percentile-bootstrap confidence interval; with several tasks also a row over all tasks
whose bootstrap is stratified by task. Against a baseline policy, the probability of
improvement P(X > Y) of the final test accuracy is reported with its own interval.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from esper_core.compare.cells import (
    CellJob,
    CellOutcome,
    CellsInterrupted,
    CellState,
    cell_state,
    run_cells,
    threads_per_job,
)
from esper_core.compare.experiment import Cell, Experiment, validate
from esper_core.compare.stats import improvement_interval, iqm_interval
from esper_core.converter import structure, unstructure
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import write_json, write_text
from esper_core.run.run_dir import SUMMARY

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
PLOT = "intervals.png"
EXPERIMENT_JSON = "experiment.json"
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


@frozen
class Plan:
    """What a (re-)run will do, for progress displays."""

    total: int
    completed: int  # finished before this run: skipped
    resumable: int
    broken: int  # unfinished without a usable checkpoint: removed and run again
    directory: Path


@frozen
class CompareReport:
    results: ComparisonResults
    outcomes: list[CellOutcome]
    directory: Path

    @property
    def failed(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


# ---------------------------------------------------------------- reading cells


def read_cell(cell: Cell, root: Path) -> CellResult | None:
    directory = cell.directory(root)
    if cell_state(directory) is not CellState.COMPLETED:
        return None
    summary = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
    if summary.get("final_test_acc_mean") is None:
        return None
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


# ---------------------------------------------------------------- Markdown


def fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_interval(estimate: float, low: float | None, high: float | None, digits: int) -> str:
    if low is None or high is None:
        return fmt(estimate, digits)
    return f"{fmt(estimate, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]"


def metric_header(metric: Metric, short: bool = False) -> str:
    if short:
        return metric.short
    return f"{metric.title} ({metric.unit})" if metric.unit else metric.title


def table_rows(
    results: ComparisonResults, task: str | None, short: bool = False
) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the table of one task (None: all tasks); shared by text outputs."""
    header = ["policy", "runs", metric_header(METRIC[IMPROVEMENT_METRIC], short)]
    if results.baseline:
        same_seed = "W/T/L" if short else f"vs {results.baseline}, same seed: W/T/L"
        header += [f"P(> {results.baseline})", same_seed]
    header += [metric_header(m, short) for m in METRICS if m.key != IMPROVEMENT_METRIC]
    lines = []
    for policy in results.policies:
        row = results.row(task, policy)
        if row is None:
            continue
        main = row.metrics[IMPROVEMENT_METRIC]
        cells = [
            policy,
            str(row.n),
            fmt_interval(main.iqm, main.low, main.high, METRIC[IMPROVEMENT_METRIC].digits),
        ]
        if results.baseline:
            imp = row.improvement
            if policy == results.baseline:
                cells += ["baseline", "-"]
            elif imp is None:
                cells += ["-", "-"]
            else:
                cells += [
                    fmt_interval(imp.probability, imp.low, imp.high, 2),
                    f"{imp.wins}/{imp.ties}/{imp.losses}",
                ]
        for m in METRICS:
            if m.key != IMPROVEMENT_METRIC:
                r = row.metrics[m.key]
                cells.append(fmt_interval(r.iqm, r.low, r.high, m.digits))
        lines.append(cells)
    return header, lines


def sections(results: ComparisonResults) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = [(t, t) for t in results.tasks]
    if len(results.tasks) > 1:
        out.append((None, "all tasks (bootstrap stratified over tasks)"))
    return out


def describe(results: ComparisonResults) -> list[str]:
    seeds = results.seeds
    span = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
    lines = [
        f"{len(seeds)} seed(s) per policy and task (seeds {span}), one episode of one env per run; "
        "the same seed gives every policy the same host initialisation and data order.",
        f"Each value: interquartile mean (IQM) over runs [{results.confidence:.0%} confidence interval, "
        f"percentile bootstrap with {results.resamples} resamples, generator seed {results.bootstrap_seed}].",
    ]
    if results.baseline:
        lines.append(
            f"P(> {results.baseline}): probability that a run of the policy ends with a higher final test "
            f"accuracy than a run of {results.baseline} (Mann–Whitney U / (n·m), ties count 1/2); "
            "0.5 means no difference, an interval excluding 0.5 a real one. "
            f"W/T/L: runs that ended better / equal / worse than {results.baseline}'s run with the "
            "same task and seed."
        )
    return lines


def to_markdown(results: ComparisonResults) -> str:
    title = f"# esper compare: {', '.join(results.policies)} on {', '.join(results.tasks)}"
    out = [title, "", *describe(results), ""]
    for task, heading in sections(results):
        header, rows = table_rows(results, task)
        out += [f"## {heading}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    if results.missing:
        out += ["## Missing runs", "", *[f"- {m}" for m in results.missing], ""]
    return "\n".join(out)


# ---------------------------------------------------------------- the command


def write_results(results: ComparisonResults, root: Path) -> None:
    from esper_core.compare.interval_plot import plot_intervals

    write_json(root / RESULTS_JSON, unstructure(results))
    write_text(root / RESULTS_MD, to_markdown(results))
    if results.rows:
        plot_intervals(results, root / PLOT)


def _record(experiment: Experiment, cells: Sequence[Cell], root: Path) -> dict[str, Any]:
    return {
        "policies": unstructure(list(experiment.policies)),
        "tasks": unstructure(list(experiment.tasks)),
        "seeds": list(experiment.seeds),
        "baseline": experiment.baseline,
        "cells": [
            {
                "task": c.task,
                "policy": c.policy,
                "seed": c.seed,
                "run_dir": str(c.directory(root).relative_to(root)),
            }
            for c in cells
        ],
    }


def prepare(
    experiment: Experiment, pm: PluginManager, out: Path, jobs: int = 1
) -> tuple[list[Cell], list[CellState], Plan]:
    """Validate the experiment and look at what ``out`` already holds; start nothing."""
    threads = experiment.base.run.threads or threads_per_job(jobs)
    cells = validate(experiment, pm, out, threads)
    states = [cell_state(c.directory(out)) for c in cells]
    plan = Plan(
        len(cells),
        states.count(CellState.COMPLETED),
        states.count(CellState.RESUMABLE),
        states.count(CellState.BROKEN),
        out,
    )
    return cells, states, plan


def compare(
    experiment: Experiment,
    pm: PluginManager,
    out: Path,
    *,
    jobs: int = 1,
    on_plan: Callable[[Plan], None] | None = None,
    on_outcome: Callable[[CellOutcome], None] | None = None,
    notify: Callable[[str], None] = print,
) -> CompareReport:
    """Validate, run the unfinished cells on ``jobs`` processes, aggregate and write results."""
    cells, states, plan = prepare(experiment, pm, out, jobs)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / EXPERIMENT_JSON, _record(experiment, cells, out))
    if on_plan is not None:
        on_plan(plan)
    todo = [
        CellJob(str(c.directory(out)), str(c.lock(out)), unstructure(c.config), experiment.plugins)
        for c, state in zip(cells, states)
        if state is not CellState.COMPLETED
    ]
    try:
        outcomes = run_cells(todo, jobs, on_outcome or (lambda _o: None), notify)
    except CellsInterrupted:
        write_results(aggregate(experiment, cells, out), out)  # what is finished so far
        raise
    results = aggregate(experiment, cells, out)
    write_results(results, out)
    return CompareReport(results, outcomes, out)
