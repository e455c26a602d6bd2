"""``esper compare --dry-run``: the cells an experiment would run, grouped, with an estimate.

The preview resolves every cell's config (unknown names and bad options fail here, all at
once) and reads what the experiment directory already holds; it builds no task, data,
model or policy (that check runs when the experiment does, before any cell starts), so it
takes about a second. A group is one (task, arm) over its seeds; a group whose runs repeat
another's settings is listed as a copy (:mod:`esper_core.compare.duplicates`). The
estimate is measured: each group's finished runs give its seconds per run, else the
task's finished runs give seconds per epoch; a group with neither is counted as
unmeasured rather than guessed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from attrs import frozen

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.duplicates import originals
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.plan import plan_cells
from esper_core.compare.static_final import growing, static_label
from esper_core.compare.tuning import tuning_cells
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import SUMMARY


@frozen
class Group:
    kind: str  # "tuning", "evaluation" or "static-final"
    task: str
    arm: str
    seeds: tuple[int, ...]
    finished: int
    copy_of: str | None = None  # "task/arm" whose runs these repeat: copied, not run
    seconds: float | None = None  # measured seconds per run


@frozen
class Preview:
    groups: tuple[Group, ...]
    jobs: int

    @property
    def runs(self) -> int:
        return sum(len(g.seeds) for g in self.groups if g.copy_of is None)

    @property
    def copies(self) -> int:
        return sum(len(g.seeds) for g in self.groups if g.copy_of is not None)

    @property
    def to_run(self) -> list[Group]:
        return [g for g in self.groups if g.copy_of is None and g.finished < len(g.seeds)]

    @property
    def estimate(self) -> float | None:
        """Seconds until every unfinished run is done, ``jobs`` at a time; None when no
        group to run was measured."""
        measured = [(len(g.seeds) - g.finished) * g.seconds for g in self.to_run if g.seconds]
        return sum(measured) / max(1, self.jobs) if measured else None

    @property
    def unmeasured(self) -> int:
        return sum(len(g.seeds) - g.finished for g in self.to_run if g.seconds is None)


def wall_time(directory: Path) -> float | None:
    try:
        return float(json.loads((directory / SUMMARY).read_text(encoding="utf-8"))["wall_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _groups(kind: str, cells: Sequence[Cell]) -> dict[tuple[str, str], list[Cell]]:
    """The cells by (task, arm); a tuning arm is one point of the grid."""
    by_arm: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        arm = cell.policy + (f" point {getattr(cell, 'point', 0)}" if kind == "tuning" else "")
        by_arm.setdefault((cell.task, arm), []).append(cell)
    return by_arm


def preview(
    experiment: Experiment, pm: PluginManager, root: Path, threads: int, jobs: int
) -> Preview:
    """Every group of cells the experiment would run, what ``root`` already holds of them,
    and the measured time per run."""
    searched = tuning_cells(experiment, pm, threads)
    cells = plan_cells(experiment, pm, threads)
    copies = originals(cells)
    per_epoch: dict[str, list[float]] = {}
    groups: list[Group] = []
    for kind, batch in (("tuning", list(searched)), ("evaluation", cells)):
        for (task, arm), members in _groups(kind, batch).items():
            finished = [c for c in members if cell_state(c.directory(root)) is CellState.COMPLETED]
            times = [t for c in finished if (t := wall_time(c.directory(root))) is not None]
            for c, t in zip(finished, times):
                if c.config.env.max_epochs:  # unset: the task's default, unknown here
                    per_epoch.setdefault(task, []).append(t / c.config.env.max_epochs)
            twins = {(copies[c].task, copies[c].policy) for c in members if c in copies}
            whole = len(twins) == 1 and all(c in copies for c in members)
            copy_of = "/".join(next(iter(twins))) if whole else None
            groups.append(
                Group(
                    kind,
                    task,
                    arm,
                    tuple(c.seed for c in members),
                    len(finished),
                    copy_of,
                    statistics.fmean(times) if times else None,
                )
            )
    # Each group without a measurement of its own: the task's seconds per epoch.
    epochs = {(c.task, c.policy): c.config.env.max_epochs or 0 for c in cells}
    for i, g in enumerate(groups):
        if g.seconds is None and per_epoch.get(g.task):
            length = epochs.get((g.task, g.arm.split(" ")[0]), 0)
            if length:
                groups[i] = _with_seconds(g, statistics.fmean(per_epoch[g.task]) * length)
    for policy in growing(experiment):
        for task_arm in experiment.tasks:
            label = task_arm.label
            grown = next((g for g in groups if g.task == label and g.arm == policy), None)
            groups.append(
                Group(
                    "static-final",
                    label,
                    static_label(policy),
                    experiment.seeds,
                    0,
                    None,
                    grown.seconds if grown else None,
                )
            )
    return Preview(tuple(groups), jobs)


def _with_seconds(group: Group, seconds: float) -> Group:
    return Group(
        group.kind, group.task, group.arm, group.seeds, group.finished, group.copy_of, seconds
    )


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
        state = f"{g.finished}/{len(g.seeds)} finished" if g.finished else "to run"
        if g.copy_of is not None:
            state = f"same settings as {g.copy_of}: copied, not run"
        elif g.kind == "static-final":
            state = "once each grown run finishes (a run that did not grow: copied from wait)"
        cost = f", ~{duration(g.seconds)} per run" if g.seconds and g.copy_of is None else ""
        lines.append(
            f"  {g.kind:<12} {g.task} / {g.arm} / seeds {seed_span(g.seeds)}: {state}{cost}"
        )
    remaining = sum(len(g.seeds) - g.finished for g in p.to_run)
    searched = sum(len(g.seeds) for g in p.groups if g.kind == "tuning" and g.copy_of is None)
    tuning = f"{searched} of them tuning runs; " if searched else ""
    summary = (
        f"{p.runs} runs ({tuning}{remaining} to run), {p.copies} copies of another run's settings"
    )
    if p.estimate is not None:
        unmeasured = f" + {p.unmeasured} runs not yet measured" if p.unmeasured else ""
        summary += f"; about {duration(p.estimate)} at {p.jobs} job(s){unmeasured}"
    else:
        summary += (
            "; no estimate yet: times are measured from finished runs of this experiment "
            "(run it, then --dry-run again)"
        )
    return [*lines, summary]
