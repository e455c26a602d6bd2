"""``esper compare --dry-run``: the cells an experiment would run, grouped, with an estimate.

The preview resolves every cell's config (unknown names and bad options fail here, all
at once) and reads what the experiment directory already holds; it loads no data and
builds no model or policy (that check runs when the experiment does, before any cell
starts) and imports no torch, so it takes about a second: a task object is made from
its options only, to say what its host computes (charlm reads its corpus for the size
of its vocabulary). A group is one (task, arm) over its seeds (a tuning group: one
grid point); the runs that repeat another's settings are listed as copies of it
(:mod:`esper_core.compare.duplicates`): ``wait``'s search and the search of the sweep's
size of the same host, say. The estimate is measured: each group's finished runs give
its seconds per run; a group with none is predicted from its host's samples and FLOPs
(:mod:`esper_core.compare.run_cost`), calibrated on the task's finished runs where there
are some, else priced by the task's own benchmark (seconds per sample and per GFLOP on
one CPU thread); a task that can say neither falls back on its finished runs' seconds
per epoch, and a group with nothing at all is counted as unmeasured rather than guessed.
A growing arm's prediction counts what it grows; an adaptive policy's is an assumption,
printed on its line.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import attrs
from attrs import frozen

from esper_core.compare.cell_dirs import (
    MAX_WALL_TIME_S,
    CellState,
    cell_state,
    damaged,
    finished_as_planned,
    summary_number,
)
from esper_core.compare.duplicates import repeats
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.overhead import overhead
from esper_core.compare.plan import plan_cells
from esper_core.compare.run_cost import CellCosts, TaskCost
from esper_core.compare.static_final import growing, static_cells, static_label
from esper_core.compare.tuning import TuningCell, tuning_cells
from esper_core.compare.tuning_results import chosen_values, search_state
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import SUMMARY

MEASURED = "measured"  # the group's own finished runs
SCALED = "scaled"  # the task's finished runs, scaled to this group's samples and FLOPs
PER_EPOCH = "per epoch"  # the task's finished runs' seconds per epoch
BENCHMARK = "benchmark"  # the task's benchmark (MeasuredCost), nothing run yet
BASES = (MEASURED, SCALED, PER_EPOCH, BENCHMARK)


@frozen
class Group:
    kind: str  # "tuning", "evaluation" or "static-final"
    task: str
    arm: str
    seeds: tuple[int, ...]
    finished: int  # runs of its own finished (copies not counted)
    # Seeds whose runs repeat the settings of the group(s) ``copy_of`` names: copied,
    # not run.
    copied: tuple[int, ...] = ()
    copy_of: str | None = None
    seconds: float | None = None  # seconds per run
    basis: str = MEASURED  # where ``seconds`` comes from: one of BASES
    # What the estimate assumed an adaptive policy grows (run_cost, growth_work).
    assumption: str | None = None

    @property
    def runs(self) -> int:
        return len(self.seeds) - len(self.copied)

    @property
    def left(self) -> int:
        return self.runs - self.finished


@frozen
class Preview:
    groups: tuple[Group, ...]
    jobs: int

    @property
    def runs(self) -> int:
        return sum(g.runs for g in self.groups)

    @property
    def copies(self) -> int:
        return sum(len(g.copied) for g in self.groups)

    @property
    def to_run(self) -> list[Group]:
        return [g for g in self.groups if g.left > 0]

    @property
    def pools(self) -> int:
        """Pools of worker processes the command starts: one per kind of run left (the
        search's, the evaluation's, the static-final runs')."""
        return len({g.kind for g in self.to_run})

    @property
    def estimate(self) -> float | None:
        """Seconds until every unfinished run is done, ``jobs`` at a time, and the command's
        own start, checks and figures (:mod:`esper_core.compare.overhead`); None when no
        group to run was measured."""
        measured = [g.left * g.seconds for g in self.to_run if g.seconds]
        if not measured:
            return None
        return sum(measured) / max(1, self.jobs) + overhead(self.pools)

    @property
    def unmeasured(self) -> int:
        return sum(g.left for g in self.to_run if g.seconds is None)

    @property
    def from_benchmark(self) -> bool:
        """Whether part of the estimate is the tasks' benchmarks, not runs of this experiment."""
        return any(g.basis == BENCHMARK for g in self.to_run if g.seconds)


def wall_time(directory: Path) -> float:
    """A finished run's seconds; the :func:`~esper_core.compare.cell_dirs.damaged` error
    when its summary cannot be read or holds no time a run writes (NaN, inf and negative
    times made the estimate a traceback or a negative duration)."""
    try:
        summary = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise damaged(directory, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(summary, dict):
        raise damaged(directory, "not a table")
    return summary_number(directory, summary, "wall_time", MAX_WALL_TIME_S)


def _arm(kind: str, cell: Cell) -> str:
    """A group's arm: a tuning group is one point of the grid."""
    return cell.policy + (f" point {getattr(cell, 'point', 0)}" if kind == "tuning" else "")


def _groups(kind: str, cells: Sequence[Cell]) -> dict[tuple[str, str], list[Cell]]:
    """The cells by (task, arm)."""
    by_arm: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        by_arm.setdefault((cell.task, _arm(kind, cell)), []).append(cell)
    return by_arm


def _source(original: Cell) -> str:
    """The group a copied run is taken from, as the listing names it."""
    if isinstance(original, TuningCell):
        return f"tuning {original.task}/{_arm('tuning', original)}"
    return f"{original.task}/{original.policy}"


def _kept(cell: Cell, root: Path, pm: PluginManager) -> bool:
    """Whether a static-final cell already finished with the settings planned for it."""
    return finished_as_planned(cell.directory(root), cell.config, pm)


def preview(
    experiment: Experiment, pm: PluginManager, root: Path, threads: int, jobs: int
) -> Preview:
    """Every group of cells the experiment would run, what ``root`` already holds of them,
    and the measured time per run. Once the search in ``root`` has chosen every arm's
    point, the evaluation is planned with it."""
    searched = tuning_cells(experiment, pm, threads)
    tuned, known = search_state(experiment, pm, root, searched)
    cells = plan_cells(experiment, pm, threads, chosen_values(tuned) if known else None)
    copies = repeats(searched, cells)
    costs = CellCosts(pm)
    per_epoch: dict[str, list[float]] = {}
    # Per task, its finished runs' (seconds, predicted cost): the calibration on this machine.
    done: dict[str, list[tuple[float, TaskCost]]] = {}
    groups: list[Group] = []
    first: list[Cell] = []
    for kind, batch in (("tuning", list(searched)), ("evaluation", cells)):
        for (task, arm), members in _groups(kind, batch).items():
            own = [c for c in members if c not in copies]
            finished = [c for c in own if cell_state(c.directory(root)) is CellState.COMPLETED]
            timed = [(c, wall_time(c.directory(root))) for c in finished]
            for c, t in timed:
                if c.config.env.max_epochs:  # unset: the task's default, unknown here
                    per_epoch.setdefault(task, []).append(t / c.config.env.max_epochs)
                if (cost := costs(c.config)) is not None:
                    done.setdefault(task, []).append((t, cost))
            times = [t for _, t in timed]
            sources = dict.fromkeys(_source(copies[c]) for c in members if c in copies)
            groups.append(
                Group(
                    kind,
                    task,
                    arm,
                    tuple(c.seed for c in members),
                    len(finished),
                    tuple(c.seed for c in members if c in copies),
                    ", ".join(sources) or None,
                    statistics.fmean(times) if times else None,
                )
            )
            first.append(members[0])
    # Each group without a measurement of its own: predicted from its host's cost.
    epochs = {(c.task, c.policy): c.config.env.max_epochs or 0 for c in cells}
    for i, (g, cell) in enumerate(zip(groups, first)):
        if g.seconds is not None:
            continue
        cost = costs(cell.config)
        estimate = _predicted(cost, done.get(g.task, []))
        length = epochs.get((g.task, g.arm.split(" ")[0]), 0)
        if estimate is not None:
            assumed = cost.assumption if cost is not None else None
            groups[i] = attrs.evolve(g, seconds=estimate[0], basis=estimate[1], assumption=assumed)
        elif per_epoch.get(g.task) and length:
            seconds = statistics.fmean(per_epoch[g.task]) * length
            groups[i] = attrs.evolve(g, seconds=seconds, basis=PER_EPOCH)
    statics = static_cells(experiment, cells, root, pm) if growing(experiment) else []
    for policy in growing(experiment):
        for task_arm in experiment.tasks:
            label = task_arm.label
            at = next(
                (i for i, g in enumerate(groups) if g.task == label and g.arm == policy), None
            )
            grown = groups[at] if at is not None else None
            twin = first[at] if at is not None else None
            twin_seconds, basis, assumed = _twin_cost(grown, twin, costs, done.get(label, []))
            kept = [
                c
                for c in statics
                if c.task == label and c.policy == static_label(policy) and _kept(c, root, pm)
            ]
            groups.append(
                Group(
                    "static-final",
                    label,
                    static_label(policy),
                    experiment.seeds,
                    len(kept),
                    seconds=twin_seconds,
                    basis=basis,
                    assumption=assumed,
                )
            )
    return Preview(tuple(groups), jobs)


def _twin_cost(
    grown: Group | None,
    cell: Cell | None,
    costs: CellCosts,
    finished: Sequence[tuple[float, TaskCost]],
) -> tuple[float | None, str, str | None]:
    """(seconds, basis, assumption) of a static-final run: its growing arm's measured time,
    or that arm's prediction with its growth trained from epoch 0, as the twin trains it."""
    if grown is None or cell is None:
        return None, MEASURED, None
    if grown.basis == MEASURED or grown.seconds is None:
        return grown.seconds, grown.basis, grown.assumption
    cost = costs(cell.config, from_start=True)
    estimate = _predicted(cost, finished)
    if estimate is None or cost is None:
        return grown.seconds, grown.basis, grown.assumption
    return estimate[0], estimate[1], cost.assumption


def _predicted(
    cost: TaskCost | None, finished: Sequence[tuple[float, TaskCost]]
) -> tuple[float, str] | None:
    """(seconds per run, basis) of a group not yet run, from its host's work: calibrated on
    the task's finished runs (their measured seconds over what the same prediction gave
    them), else priced by the task's benchmark; None where the task can say neither."""
    if cost is None:
        return None
    if finished:
        if cost.cost is not None:
            # The benchmark's split between samples and FLOPs, scaled to this machine.
            ratio = sum(t for t, _ in finished) / sum(
                c.work.seconds(cost.cost) for _, c in finished
            )
            return cost.work.seconds(cost.cost) * ratio, SCALED
        per_gflop = sum(t for t, _ in finished) / sum(c.work.gflop for _, c in finished)
        return cost.work.gflop * per_gflop, SCALED
    if cost.cost is not None:
        return cost.work.seconds(cost.cost), BENCHMARK
    return None


def duration(seconds: float) -> str:
    """``1 h 05 min``, ``12 min``, ``40 s``: an estimate, to the minute."""
    minutes = round(seconds / 60)
    if minutes >= 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes} min" if minutes else f"{round(seconds)} s"


def seed_span(seeds: Sequence[int]) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def preview_lines(p: Preview) -> list[str]:
    """The preview as text: one line per group, then the count and the estimate."""
    lines = []
    for g in p.groups:
        state = f"{g.finished}/{g.runs} finished" if g.finished else "to run"
        if g.copy_of is not None and not g.runs:
            state = f"same settings as {g.copy_of}: copied, not run"
        elif g.copy_of is not None:
            state += f"; random seeds {seed_span(g.copied)}: same settings as {g.copy_of}: copied, not run"
        elif g.kind == "static-final" and g.left:
            waiting = "once each grown run finishes (a run that did not grow: copied from wait)"
            state = f"{state}; the rest {waiting}" if g.finished else waiting
        estimated = "" if g.basis == MEASURED else " (estimated)"
        if g.assumption and g.basis != MEASURED:
            estimated = f" (estimated; assumes {g.assumption})"
        cost = f", ~{duration(g.seconds)} per run{estimated}" if g.seconds and g.runs else ""
        lines.append(
            f"  {g.kind:<12} {g.task} / {g.arm} / random seeds {seed_span(g.seeds)}: {state}{cost}"
        )
    remaining = sum(g.left for g in p.to_run)
    searched = sum(g.runs for g in p.groups if g.kind == "tuning")
    tuning = f"{searched} of them tuning runs; " if searched else ""
    summary = (
        f"{p.runs} runs ({tuning}{remaining} to run), {p.copies} copies of another run's settings"
    )
    if not remaining:
        summary += "; every run has finished: the comparison only redraws its tables"
    elif p.estimate is not None:
        unmeasured = f" + {p.unmeasured} runs not estimated" if p.unmeasured else ""
        summary += f"; about {duration(p.estimate)} at {p.jobs} job(s){unmeasured}"
        if p.from_benchmark:
            summary += (
                " (an estimate from each task's benchmark, one CPU thread a job, the "
                "command's start and figures counted, growth counted as each line says; "
                "BENCHMARKS.md)"
            )
    else:
        summary += (
            "; no estimate yet: no task here has a measured cost (benchmarks/task_cost.py), "
            "so times are measured from finished runs of this experiment (run it, then "
            "--dry-run again)"
        )
    return [*lines, summary]
