"""The tuning cells of an experiment with ``[tuning]``: every arm on every grid point and
tuning seed, run before the evaluation cells and like them.

Each (task, policy or sweep size, grid point, tuning seed) is an ordinary cell (same runner,
jobs, locks, reuse of finished cells and resume of checkpointed ones) whose config is the
arm's with the point's values set over it, under ``OUT/tuning/cells/TASK/ARM/point-K/
seed-S``. :mod:`esper_core.compare.tuning_results` reads them back and chooses each arm's
point; the evaluation cells then run with it. A ``static-final`` baseline is not searched:
it retrains a grown model's final architecture with that policy's chosen values, the
grown model's own recipe.
"""

from __future__ import annotations

from pathlib import Path

from attrs import frozen

from esper_core.compare.experiment import CELLS_DIR, LOCKS_DIR, Cell, Experiment
from esper_core.compare.out_dir import TUNING_DIR
from esper_core.compare.plan import arm_pairs, resolve_configs, with_seed
from esper_core.compare.tuning_grid import describe_point
from esper_core.plugins import PluginManager


@frozen
class TuningCell(Cell):
    """A cell of the search: ``point`` indexes the grid in grid order."""

    point: int = 0

    def directory(self, root: Path) -> Path:
        return (
            root
            / TUNING_DIR
            / CELLS_DIR
            / self.task
            / self.policy
            / f"point-{self.point}"
            / f"seed-{self.seed}"
        )

    def lock(self, root: Path) -> Path:
        name = f"{TUNING_DIR}--{self.task}--{self.policy}--point-{self.point}--seed-{self.seed}"
        return root / LOCKS_DIR / f"{name}.lock"


def tuning_cells(experiment: Experiment, pm: PluginManager, threads: int = 0) -> list[TuningCell]:
    """Every cell of the search, seed-major, each (task, arm, point) resolved once: a grid
    value a task or policy refuses is reported with the arm and the point. Empty without
    ``[tuning]``."""
    tuning = experiment.tuning
    if tuning is None:
        return []
    points = tuning.points()
    wanted = [(t, p, k, point) for t, p in arm_pairs(experiment) for k, point in enumerate(points)]
    configs = resolve_configs(
        experiment,
        pm,
        threads,
        [
            (t, p, point, f"tuning {p.label} on {t.label} ({describe_point(point)})")
            for t, p, _, point in wanted
        ],
    )
    return [
        TuningCell(t.label, p.label, seed, with_seed(config, seed), k)
        for seed in tuning.seeds
        for (t, p, k, _), config in zip(wanted, configs)
    ]
