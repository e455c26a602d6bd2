"""From an experiment to its cells, checked before any of them runs.

:func:`validate` resolves every (task, policy) configuration and builds each (task, policy) once the way
a cell would, so a missing dataset or a PPO checkpoint that does not fit fails at once. :func:`stale_cells` finds the finished
cells that were made with another config, which the experiment runs again. With ``[tuning]``,
each (task, policy)'s chosen values (dotted config keys) are set over its cells' config.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from esper_core.compare.cell_dirs import (
    CellState,
    cell_state,
    config_differences,
    finished_as_planned,
    stored_config,
)
from esper_core.compare.experiment import Arm, Cell, Experiment, ExperimentError
from esper_core.compare.size_sweep import sweep_arms
from esper_core.compare.tuning_grid import apply_point
from esper_core.config import RunConfig, config_to_dict
from esper_core.config_io import merge
from esper_core.converter import structure
from esper_core.errors import ConfigError, EsperError
from esper_core.plugins import PluginManager
from esper_core.run.resolve import resolve
from esper_core.run.session import open_session

# Per (task label, policy label): dotted config keys and values set over its cells' config.
Chosen = Mapping[tuple[str, str], Mapping[str, Any]]


def _cell_data(base: RunConfig, task: Arm, policy: Arm, seed: int, threads: int) -> dict[str, Any]:
    # An arm's own run config (a sweep point's or a policy's training length) over the shared one.
    data = merge(config_to_dict(base), policy.config)
    data.pop("schema_version", None)
    run = data.setdefault("run", {})
    run.pop("name", None)
    # One episode of one env per cell: the seed alone decides the host and the data order.
    run.update(
        task=task.name,
        policy=policy.spec,
        seed=seed,
        episodes=1,
        n_envs=1,
        quiet=True,
        threads=threads,
    )
    for kind, arm in (("tasks", task), ("policies", policy)):
        table = data.setdefault(kind, {})
        table[arm.name] = merge(table.get(arm.name, {}), arm.options)
    return data


def arm_pairs(experiment: Experiment) -> list[tuple[Arm, Arm]]:
    """Every (task, policy) of the experiment, then the size sweep's (task, size)."""
    pairs = [(t, p) for t in experiment.tasks for p in experiment.policies]
    return pairs + sweep_arms(experiment)


def resolve_configs(
    experiment: Experiment,
    pm: PluginManager,
    threads: int,
    wanted: Sequence[tuple[Arm, Arm, Mapping[str, Any], str]],
) -> list[RunConfig]:
    """The resolved config of each (task, policy, values set over it, where to say a problem
    is), seeded with the first seed; every problem of every one reported at once."""
    problems: list[str] = []
    resolved: list[RunConfig] = []
    for task, policy, point, where in wanted:
        try:
            data = _cell_data(experiment.base, task, policy, experiment.seeds[0], threads)
            data = apply_point(data, dict(point))
            resolved.append(resolve(structure(data, RunConfig), pm).config)
        except ConfigError as exc:
            problems.extend(f"{where}: {p}" for p in exc.problems)
        except EsperError as exc:
            problems.append(f"{where}: {exc}")
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    return resolved


def with_seed(config: RunConfig, seed: int) -> RunConfig:
    return attrs.evolve(config, run=attrs.evolve(config.run, seed=seed))


def plan_cells(
    experiment: Experiment, pm: PluginManager, threads: int = 0, chosen: Chosen | None = None
) -> list[Cell]:
    """Every cell, seed-major (all policies of a seed finish close together), the size
    sweep's after the policies', with its config resolved (``chosen``: the values tuning
    chose per (task, policy)): unknown names and bad options of any (task, policy or size)
    are all reported at once."""
    pairs = arm_pairs(experiment)
    configs = resolve_configs(
        experiment,
        pm,
        threads,
        [
            (t, p, (chosen or {}).get((t.label, p.label), {}), f"{p.label} on {t.label}")
            for t, p in pairs
        ],
    )
    resolved = {(t.label, p.label): c for (t, p), c in zip(pairs, configs)}
    cells = []
    for seed in experiment.seeds:
        for task, policy in pairs:
            config = with_seed(resolved[task.label, policy.label], seed)
            cells.append(Cell(task.label, policy.label, seed, config))
    return cells


def stale_cells(cells: Sequence[Cell], root: Path, pm: PluginManager) -> dict[Path, list[str]]:
    """Finished or checkpointed cells that cannot be reused, with why: their config differs
    from this experiment's on a setting that decides a result (the resolved config holds the
    blueprint set, so another set of installed blueprints counts), or is unreadable."""
    stale: dict[Path, list[str]] = {}
    for cell in cells:
        directory = cell.directory(root)
        if cell_state(directory) not in (CellState.COMPLETED, CellState.RESUMABLE):
            continue
        stored = stored_config(directory, pm)
        differences = (
            ["its config.toml is unreadable"]
            if stored is None
            else config_differences(stored, cell.config)
        )
        if differences:
            stale[directory] = differences
    return stale


def check_constructible(
    experiment: Experiment, cells: Sequence[Cell], pm: PluginManager, root: Path
) -> None:
    """Build each (task, policy) once as a cell would (task data, env, policy) in a scratch
    directory: a missing dataset or a PPO checkpoint that does not fit fails here, before
    any cell starts. A (task, policy) whose every cell under ``root`` has finished is only
    read, so it is not built: an experiment run on GPUs is reported where there are none."""
    problems: list[str] = []
    firsts: dict[tuple[str, str], Cell] = {}
    pending = {
        (c.task, c.policy)
        for c in cells
        if not finished_as_planned(c.directory(root), c.config, pm)
    }
    for cell in cells:
        if (cell.task, cell.policy) in pending:
            firsts.setdefault((cell.task, cell.policy), cell)
    with tempfile.TemporaryDirectory(prefix="esper-compare-check-") as scratch:
        for i, ((task, policy), cell) in enumerate(firsts.items()):
            config = attrs.evolve(
                cell.config, run=attrs.evolve(cell.config.run, telemetry=[], threads=0)
            )
            try:
                session = open_session(
                    config, pm, "run", Path(scratch) / str(i), resume=False, quiet=True
                )
            except EsperError as exc:
                problems.append(f"{policy} on {task}: {exc}")
                continue
            session.hub.close()
            session.executor.close()
    if problems:
        raise ExperimentError(problems)


def validate(
    experiment: Experiment,
    pm: PluginManager,
    root: Path,
    threads: int = 0,
    chosen: Chosen | None = None,
) -> list[Cell]:
    """Plan the cells and check everything that can be checked before one starts."""
    cells = plan_cells(experiment, pm, threads, chosen)
    check_constructible(experiment, cells, pm, root)
    return cells
