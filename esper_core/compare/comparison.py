"""``esper compare``: policies x tasks x seeds, run as cells, summarised robustly.

:func:`compare` validates the experiment (:mod:`esper_core.compare.plan`); with
``[tuning]`` it first runs the search's cells (:mod:`esper_core.compare.tuning`) and plans
the evaluation cells with each arm's chosen values; it runs the
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

import attrs
from attrs import frozen

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.cell_runner import make_runner, threads_per_job
from esper_core.compare.cells import (
    CellJob,
    CellOutcome,
    CellsInterrupted,
)
from esper_core.compare.duplicates import copy_finished, originals, repeats
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.interval_plot import plot_intervals
from esper_core.compare.metric import task_metrics
from esper_core.compare.out_dir import (
    EXPERIMENT_JSON,
    PARETO_PLOT,
    PLOT,
    RESULTS_JSON,
    RESULTS_MD,
    check_out,
)
from esper_core.compare.pareto_plot import plot_pareto
from esper_core.compare.plan import plan_cells, stale_cells, validate
from esper_core.compare.results import ComparisonResults, aggregate
from esper_core.compare.static_final import growing, static_cells
from esper_core.compare.tables import to_markdown
from esper_core.compare.tuning import TuningCell, tuning_cells
from esper_core.compare.tuning_grid import describe_point
from esper_core.compare.tuning_results import TuningResults, chosen_values, search_state
from esper_core.converter import unstructure
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import write_json, write_text


@frozen
class Plan:
    """What a (re-)run will do, for progress displays."""

    total: int
    completed: int  # finished before this run: skipped
    resumable: int
    broken: int  # unfinished without a usable checkpoint: removed and run again
    directory: Path
    stale: int = 0  # made with another config or blueprint set: removed and run again
    tuning: int = 0  # of ``total``, the cells of the search run before the evaluation
    # Cells that repeat another cell's settings: copied from it, not run (not in ``total``).
    duplicates: int = 0


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


def _record(
    experiment: Experiment, cells: Sequence[Cell], root: Path, searched: Sequence[TuningCell] = ()
) -> dict[str, Any]:
    tuning = experiment.tuning
    return {
        "policies": unstructure(list(experiment.policies)),
        "tasks": unstructure(list(experiment.tasks)),
        "seeds": list(experiment.seeds),
        "baseline": experiment.baseline,
        "baselines": list(experiment.baselines),
        "sweep": unstructure(list(experiment.sweep)),
        "frontier_metric": experiment.frontier_metric,
        "training_groups": unstructure(list(experiment.training_groups)),
        "cells": [
            {
                "task": c.task,
                "policy": c.policy,
                "seed": c.seed,
                "run_dir": str(c.directory(root).relative_to(root)),
            }
            for c in cells
        ],
        "tuning": None
        if tuning is None
        else {
            "seeds": list(tuning.seeds),
            "metric": tuning.metric,
            "grid": tuning.grid,
            "cells": [
                {
                    "task": c.task,
                    "policy": c.policy,
                    "point": c.point,
                    "seed": c.seed,
                    "run_dir": str(c.directory(root).relative_to(root)),
                }
                for c in searched
            ],
        },
    }


def prepare(
    experiment: Experiment, pm: PluginManager, out: Path, jobs: int = 1
) -> tuple[list[Cell], list[CellState], Plan]:
    """Validate the experiment and look at what ``out`` already holds; start nothing. The
    cells and states are the evaluation's; the plan counts the search's cells too."""
    prepared = _prepare(experiment, pm, out, jobs)
    return prepared.cells, prepared.states, prepared.plan


def _threads(experiment: Experiment, jobs: int) -> int:
    return experiment.base.run.threads or threads_per_job(jobs)


def _choices(tuned: TuningResults) -> str:
    return "; ".join(
        f"{a.arm} on {a.task}: {describe_point(a.chosen)}"
        for a in tuned.arms
        if a.chosen is not None and a.same_as is None
    )


@frozen
class _Prepared:
    searched: list[TuningCell]
    cells: list[Cell]
    states: list[CellState]  # the evaluation cells'
    plan: Plan
    stale: dict[Path, list[str]]
    # The static-final runs the plan counts as finished: any other that finishes or is
    # copied is reported, so the count ends at the total.
    counted: frozenset[Path]


def _prepare(experiment: Experiment, pm: PluginManager, out: Path, jobs: int) -> _Prepared:
    check_out(out)
    threads = _threads(experiment, jobs)
    searched = tuning_cells(experiment, pm, threads)
    tuned, known = search_state(experiment, pm, out, searched)
    # Until every arm is chosen, the evaluation cells are checked with the shared recipe;
    # what they will run is planned once the search has finished.
    cells = validate(experiment, pm, out, threads, chosen_values(tuned) if known else None)
    stale = stale_cells([*searched, *cells] if known else searched, out, pm)
    states = [
        CellState.MISSING if c.directory(out) in stale else cell_state(c.directory(out))
        for c in [*searched, *cells]
    ]
    # One static-final cell per cell of a growing policy, planned once that cell finished.
    grown = set(growing(experiment))
    expected = sum(1 for c in cells if c.policy in grown)
    # Finished already, and kept: one of a grown run that runs again, or one made with
    # another config, runs again and is counted when it finishes (counting it here too
    # took the progress counter past its total).
    statics = static_cells(experiment, [c for c in cells if c.directory(out) not in stale], out, pm)
    redone = stale_cells(statics, out, pm) if known else {}
    counted = frozenset(
        c.directory(out)
        for c in statics
        if cell_state(c.directory(out)) is CellState.COMPLETED and c.directory(out) not in redone
    )
    # A cell repeating another's settings is copied from it: not counted as a run.
    repeated = repeats(searched, cells)
    copies = sum(1 for c in repeated if cell_state(c.directory(out)) is CellState.COMPLETED)
    plan = Plan(
        len(states) + expected - len(repeated),
        states.count(CellState.COMPLETED) + len(counted) - copies,
        states.count(CellState.RESUMABLE),
        states.count(CellState.BROKEN),
        out,
        len(stale) + len(redone),
        sum(1 for c in searched if c not in repeated),
        len(repeated),
    )
    return _Prepared(searched, cells, states[len(searched) :], plan, stale, counted)


def _jobs(
    experiment: Experiment, cells: Sequence[Cell], out: Path, skip: Sequence[Cell] = ()
) -> list[CellJob]:
    """The unfinished cells to run, but those in ``skip`` (copies of another cell)."""
    return [
        CellJob(str(c.directory(out)), str(c.lock(out)), unstructure(c.config), experiment.plugins)
        for c in cells
        if c not in skip and cell_state(c.directory(out)) is not CellState.COMPLETED
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
    write results. With ``[tuning]``, the search's cells run first; the evaluation's wait
    until every arm is chosen (a failed search cell stops there: run again to retry)."""
    cell_runner = make_runner(pm, runner, runner_options or {}, jobs)
    prepared = _prepare(experiment, pm, out, jobs)
    searched, cells, plan, counted = (
        prepared.searched,
        prepared.cells,
        prepared.plan,
        prepared.counted,
    )
    _forget_stale(prepared.stale, out, notify)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / EXPERIMENT_JSON, _record(experiment, cells, out, searched))
    if on_plan is not None:
        on_plan(plan)
    report = on_outcome or (lambda _o: None)
    statics: list[Cell] = []
    evaluated: list[Cell] = []  # the evaluation's cells, once their configs are known
    metrics = task_metrics(experiment, pm)
    outcomes: list[CellOutcome] = []

    def results() -> ComparisonResults:
        tuned, _ = search_state(experiment, pm, out, searched)
        found = aggregate(experiment, [*evaluated, *statics], out, metrics)
        return attrs.evolve(found, tuning=tuned)

    try:
        if searched:
            # Two arms on one host (wait and the sweep's size of that host) search the
            # same runs, and so do points that differ in a setting an arm does not use:
            # each is trained once and copied for the others.
            echoes = originals(searched)
            outcomes += cell_runner.run(
                _jobs(experiment, searched, out, list(echoes)), report, notify
            )
            copy_finished(echoes, out)
        tuned, known = search_state(experiment, pm, out, searched)
        if not known:
            notify(
                "tuning unfinished: the evaluation runs once every arm's search has "
                "finished; run the same command again"
            )
            done = results()
            write_results(done, out)
            return CompareReport(done, outcomes, out)
        if tuned is not None:  # the cells with each arm's chosen values
            notify(f"tuning chosen: {_choices(tuned)}")
            cells = plan_cells(experiment, pm, _threads(experiment, jobs), tuned.chosen())
            _forget_stale(stale_cells(cells, out, pm), out, notify)
            if on_plan is not None and searched:
                # The first plan counted the evaluation's cells at the shared recipe; with
                # the chosen values some of them must run again: the counts start over.
                again = _prepare(experiment, pm, out, jobs)
                counted = again.counted
                on_plan(again.plan)
        evaluated = cells
        write_json(out / EXPERIMENT_JSON, _record(experiment, cells, out, searched))
        repeats = originals(cells)
        outcomes += cell_runner.run(_jobs(experiment, cells, out, list(repeats)), report, notify)
        copy_finished(repeats, out)
        statics = static_cells(experiment, cells, out, pm)
        _forget_stale(stale_cells(statics, out, pm), out, notify)
        for static in statics:  # kept from before, of a grown run the plan did not count
            directory = static.directory(out)
            if directory not in counted and cell_state(directory) is CellState.COMPLETED:
                report(CellOutcome(str(directory), "skipped"))
        write_json(out / EXPERIMENT_JSON, _record(experiment, [*cells, *statics], out, searched))
        # A run that did not grow has its wait twin as static final: copied, not trained.
        twins = originals(statics, before=cells)
        for twin in copy_finished(twins, out):  # counted in the plan's static-final runs
            report(CellOutcome(str(twin.directory(out)), "skipped"))
        outcomes += cell_runner.run(_jobs(experiment, statics, out, list(twins)), report, notify)
        # Twins of a static-final cell that has just run (two arms that ended with the same
        # architecture on a seed) are copied once their originals have finished.
        for twin in copy_finished(twins, out):
            report(CellOutcome(str(twin.directory(out)), "skipped"))
    except CellsInterrupted:
        write_results(results(), out)  # finished so far
        raise
    done = results()
    write_results(done, out)
    return CompareReport(done, outcomes, out)
