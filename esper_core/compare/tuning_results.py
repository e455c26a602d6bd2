"""The search's results: each arm's grid points, their validation values, and its choice.

Read from the finished tuning cells' ``summary.json`` (validation accuracy, or the final
validation loss for a task measured in loss; :mod:`esper_core.compare.tuning_choice` has
the rule). An arm is chosen only once every cell of its search finished: the evaluation
cells wait for that. A ``POLICY.static-final`` baseline gets POLICY's choice (the grown
model's recipe), recorded with ``same_as``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.experiment import Experiment
from esper_core.compare.metric import metric_kinds
from esper_core.compare.plan import stale_cells
from esper_core.compare.stalls import StallRule, failed_seeds
from esper_core.compare.static_final import growing, static_label
from esper_core.compare.tuning import TuningCell
from esper_core.compare.tuning_choice import RULE, choose, grid_edges, score
from esper_core.errors import RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import SUMMARY

VAL_ACC, VAL_LOSS = "val_acc", "val_loss"


@frozen
class PointResult:
    """One grid point of one arm: its values, per tuning seed the validation value (None:
    not finished, or not finite) and their mean (None unless every seed has a value)."""

    values: dict[str, Any]
    scores: list[float | None]
    mean: float | None
    # Tuning seeds on which the point did not train (esper_core.compare.stalls): a point
    # with any is never chosen, so the next rate down is.
    failed: list[int] = attrs.field(factory=list)


@frozen
class ArmTuning:
    """What the search chose for one arm (a policy, a sweep size or a static-final
    baseline) on one task; ``point`` indexes the grid, None while the search is unfinished."""

    task: str
    arm: str
    metric: str  # val_acc | val_loss
    higher_is_better: bool
    point: int | None
    chosen: dict[str, Any] | None
    points: list[PointResult] = attrs.field(factory=list)  # empty for a static-final
    same_as: str | None = None  # static-final: the policy whose choice it uses
    # grid key -> "highest" | "lowest" where the choice is that end of its grid
    # (tuning_choice.grid_edges): the best value may lie beyond it
    edges: dict[str, str] = attrs.field(factory=dict)


@frozen
class TuningResults:
    seeds: list[int]
    grid: dict[str, list[Any]]
    metric: str  # the experiment's setting: auto, accuracy or loss
    rule: str
    arms: list[ArmTuning]

    @property
    def finished(self) -> bool:
        return all(a.chosen is not None for a in self.arms)

    def arm(self, task: str, arm: str) -> ArmTuning | None:
        return next((a for a in self.arms if a.task == task and a.arm == arm), None)

    def chosen(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(task, arm) -> the chosen values, for every chosen arm."""
        return {(a.task, a.arm): a.chosen for a in self.arms if a.chosen is not None}


def validation_value(directory: Path, metric: str) -> float:
    """The final validation accuracy or loss a finished cell recorded."""
    summary = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
    try:
        if metric == VAL_ACC:
            return float(summary["final_val_acc_mean"])
        (episode,) = summary["episodes"]
        return float(episode["final_val_loss"])
    except (KeyError, TypeError, ValueError) as exc:  # also: not exactly one episode
        # A finished cell is never run again, so a summary without the value must be named.
        raise RunDirError(
            f"{directory / SUMMARY} has no final validation value ({type(exc).__name__}: "
            f"{exc}); delete that run directory to run the tuning cell again"
        ) from None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _arm(
    task: str,
    arm: str,
    metric: str,
    cells: Sequence[TuningCell],
    root: Path,
    points: Sequence[dict[str, Any]],
    seeds: Sequence[int],
    rule: StallRule,
) -> ArmTuning:
    by_key = {(c.point, c.seed): c for c in cells}
    higher = metric == VAL_ACC
    raws: list[list[float | None]] = []  # per point, per seed: None while unfinished
    for k in range(len(points)):
        raw: list[float | None] = []
        for seed in seeds:
            directory = by_key[k, seed].directory(root)
            done = cell_state(directory) is CellState.COMPLETED
            raw.append(validation_value(directory, metric) if done else None)
        raws.append(raw)
    # Every point's finite values by seed: the other rates tell a seed that is hard at
    # every rate from a rate that stalled on it.
    by_seed = [
        {s: v for s, v in zip(seeds, raw) if v is not None and math.isfinite(v)} for raw in raws
    ]
    results: list[PointResult] = []
    means: list[float] = []
    eligible: list[float] = []  # the means a choice is made from: NaN where a seed failed
    counts: list[int] = []  # finished seeds per point
    for k, (values, raw) in enumerate(zip(points, raws)):
        finished = [v for v in raw if v is not None]
        counts.append(len(finished))
        means.append(score(finished) if len(finished) == len(raw) else math.nan)
        scores = [None if v is None else _finite(v) for v in raw]
        done = len(finished) == len(raw)
        others = by_seed[:k] + by_seed[k + 1 :]
        failed = failed_seeds(dict(zip(seeds, scores)), higher, rule, others) if done else []
        eligible.append(math.nan if failed else means[-1])
        results.append(PointResult(dict(values), scores, _finite(means[-1]), failed))
    complete = all(n == len(seeds) for n in counts)
    point = choose(eligible, higher) if complete else None
    return ArmTuning(
        task,
        arm,
        metric,
        higher,
        point,
        None if point is None else dict(points[point]),
        results,
    )


def tuning_results(
    experiment: Experiment, cells: Sequence[TuningCell], root: Path, pm: PluginManager
) -> TuningResults | None:
    """The search's results (None without ``[tuning]``); arms task by task, each policy
    followed by its static-final baseline, then the sweep sizes."""
    tuning = experiment.tuning
    if tuning is None:
        return None
    kinds = metric_kinds(experiment, pm, tuning.metric)
    metrics = {task: VAL_LOSS if kind == "loss" else VAL_ACC for task, kind in kinds.items()}
    by_arm: dict[tuple[str, str], list[TuningCell]] = {}
    for cell in cells:
        by_arm.setdefault((cell.task, cell.policy), []).append(cell)
    points = tuning.points()
    grown = set(growing(experiment))
    arms: list[ArmTuning] = []
    for task in experiment.tasks:
        for (t, arm), group in by_arm.items():
            if t != task.label:
                continue
            found = _arm(t, arm, metrics[t], group, root, points, tuning.seeds, experiment.stall)
            # Where no point trained on every seed the first is taken, not chosen: no edge.
            if found.point is not None and not found.points[found.point].failed:
                found = attrs.evolve(found, edges=grid_edges(tuning.grid, found.chosen or {}))
            arms.append(found)
            if arm in grown:
                arms.append(attrs.evolve(found, arm=static_label(arm), points=[], same_as=arm))
    return TuningResults(list(tuning.seeds), dict(tuning.grid), tuning.metric, RULE, arms)


def chosen_values(results: TuningResults | None) -> Mapping[tuple[str, str], dict[str, Any]]:
    """What the evaluation cells set over their config: nothing without tuning."""
    return {} if results is None else results.chosen()


def search_state(
    experiment: Experiment, pm: PluginManager, out: Path, searched: Sequence[TuningCell]
) -> tuple[TuningResults | None, bool]:
    """The search's results so far, and whether the evaluation's configs are known: no
    ``[tuning]``, or every arm chosen from cells made with this experiment's config."""
    if experiment.tuning is None:
        return None, True
    if stale_cells(searched, out, pm):  # to be run again: what they hold chose nothing
        return None, False
    tuned = tuning_results(experiment, searched, out, pm)
    return tuned, tuned is not None and tuned.finished
