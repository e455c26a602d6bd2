"""``esper compare``: policies x tasks x seeds, run as cells, summarised robustly.

:func:`compare` validates the experiment (:mod:`esper_core.compare.plan`), runs the
unfinished cells (:mod:`esper_core.compare.cells`), then, with the ``static-final``
baseline, one more cell per finished cell of a growing policy
(:mod:`esper_core.compare.static_final`); the ``size-sweep`` baseline's cells
(:mod:`esper_core.compare.size_sweep`) are planned with the policies'. It reads every finished cell's
``summary.json`` (:mod:`esper_core.compare.results`) and writes into the experiment
directory:

- ``results.json``: the rows and every cell, through the one cattrs converter;
- ``results.md``: the same as Markdown tables (:mod:`esper_core.compare.tables`);
- ``intervals.png``: the intervals of the main metrics;
- ``pareto.png``: each task's metric against parameters and training FLOPs, with the size
  sweep's frontier where there is one, and each grown run's path through its growth
  events (:mod:`esper_core.compare.growth_paths`).

Every table, verdict and plot ranks runs in the task's metric, decided once by
:func:`esper_core.compare.metric.task_metrics` (test loss for a language model).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.cells import (
    CellJob,
    CellOutcome,
    CellsInterrupted,
    run_cells,
    threads_per_job,
)
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.interval_plot import plot_intervals
from esper_core.compare.metric import task_metrics
from esper_core.compare.pareto_plot import plot_pareto
from esper_core.compare.plan import stale_cells, validate
from esper_core.compare.results import ComparisonResults, aggregate
from esper_core.compare.static_final import growing, static_cells
from esper_core.compare.tables import to_markdown
from esper_core.components.runner import RunnerContext
from esper_core.converter import structure, unstructure
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import write_json, write_text

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
PLOT = "intervals.png"
PARETO_PLOT = "pareto.png"
EXPERIMENT_JSON = "experiment.json"


@frozen
class Plan:
    """What a (re-)run will do, for progress displays."""

    total: int
    completed: int  # finished before this run: skipped
    resumable: int
    broken: int  # unfinished without a usable checkpoint: removed and run again
    directory: Path
    stale: int = 0  # made with another config or blueprint set: removed and run again


@frozen
class CompareReport:
    results: ComparisonResults
    outcomes: list[CellOutcome]
    directory: Path

    @property
    def failed(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def write_results(results: ComparisonResults, root: Path) -> None:
    write_json(root / RESULTS_JSON, unstructure(results))
    write_text(root / RESULTS_MD, to_markdown(results))
    if results.rows:
        plot_intervals(results, root / PLOT)
        plot_pareto(results, root / PARETO_PLOT)


def _record(experiment: Experiment, cells: Sequence[Cell], root: Path) -> dict[str, Any]:
    return {
        "policies": unstructure(list(experiment.policies)),
        "tasks": unstructure(list(experiment.tasks)),
        "seeds": list(experiment.seeds),
        "baseline": experiment.baseline,
        "baselines": list(experiment.baselines),
        "sweep": unstructure(list(experiment.sweep)),
        "frontier_metric": experiment.frontier_metric,
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


def make_runner(pm: PluginManager, name: str, options: dict[str, Any], jobs: int) -> Any:
    """The ``runners.NAME`` component with its options checked (before any cell starts)."""
    cls = pm.get("runners", name)
    context = RunnerContext(jobs=jobs, pool=run_cells)
    return cls(structure(options, cls.Options, path=f"runners.{name}"), context)


def prepare(
    experiment: Experiment, pm: PluginManager, out: Path, jobs: int = 1
) -> tuple[list[Cell], list[CellState], Plan]:
    """Validate the experiment and look at what ``out`` already holds; start nothing."""
    cells, states, plan, _ = _prepare(experiment, pm, out, jobs)
    return cells, states, plan


def _prepare(
    experiment: Experiment, pm: PluginManager, out: Path, jobs: int
) -> tuple[list[Cell], list[CellState], Plan, dict[Path, list[str]]]:
    threads = experiment.base.run.threads or threads_per_job(jobs)
    cells = validate(experiment, pm, out, threads)
    stale = stale_cells(cells, out)
    states = [
        CellState.MISSING if c.directory(out) in stale else cell_state(c.directory(out))
        for c in cells
    ]
    # One static-final cell per cell of a growing policy, planned once that cell finished.
    grown = set(growing(experiment))
    expected = sum(1 for c in cells if c.policy in grown)
    done = sum(
        cell_state(c.directory(out)) is CellState.COMPLETED
        for c in static_cells(experiment, cells, out, pm)
    )
    plan = Plan(
        len(cells) + expected,
        states.count(CellState.COMPLETED) + done,
        states.count(CellState.RESUMABLE),
        states.count(CellState.BROKEN),
        out,
        len(stale),
    )
    return cells, states, plan, stale


def _jobs(experiment: Experiment, cells: Sequence[Cell], out: Path) -> list[CellJob]:
    return [
        CellJob(str(c.directory(out)), str(c.lock(out)), unstructure(c.config), experiment.plugins)
        for c in cells
        if cell_state(c.directory(out)) is not CellState.COMPLETED
    ]


def _forget_stale(stale: dict[Path, list[str]], out: Path, notify: Callable[[str], None]) -> None:
    """Remove finished cells made with another config, saying why, so they run again."""
    for directory, differences in stale.items():
        shown = "; ".join(differences[:3]) + ("; ..." if len(differences) > 3 else "")
        notify(
            f"{directory.relative_to(out)}: made with another config ({shown}); running it again"
        )
        shutil.rmtree(directory)


def compare(
    experiment: Experiment,
    pm: PluginManager,
    out: Path,
    *,
    jobs: int = 1,
    on_plan: Callable[[Plan], None] | None = None,
    on_outcome: Callable[[CellOutcome], None] | None = None,
    notify: Callable[[str], None] = print,
    runner: str = "local",
    runner_options: dict[str, Any] | None = None,
) -> CompareReport:
    """Validate, run the unfinished cells with ``runner`` (``jobs`` at a time), aggregate and
    write results."""
    cell_runner = make_runner(pm, runner, runner_options or {}, jobs)
    cells, _states, plan, stale = _prepare(experiment, pm, out, jobs)
    _forget_stale(stale, out, notify)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / EXPERIMENT_JSON, _record(experiment, cells, out))
    if on_plan is not None:
        on_plan(plan)
    report = on_outcome or (lambda _o: None)
    statics: list[Cell] = []
    metrics = task_metrics(experiment, pm)
    try:
        outcomes = cell_runner.run(_jobs(experiment, cells, out), report, notify)
        statics = static_cells(experiment, cells, out, pm)
        _forget_stale(stale_cells(statics, out), out, notify)
        write_json(out / EXPERIMENT_JSON, _record(experiment, [*cells, *statics], out))
        outcomes += cell_runner.run(_jobs(experiment, statics, out), report, notify)
    except CellsInterrupted:
        write_results(
            aggregate(experiment, [*cells, *statics], out, metrics), out
        )  # finished so far
        raise
    results = aggregate(experiment, [*cells, *statics], out, metrics)
    write_results(results, out)
    return CompareReport(results, outcomes, out)
