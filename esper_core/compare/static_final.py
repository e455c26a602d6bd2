"""The ``static-final`` baseline: what a grown run ended with, trained from scratch.

For every finished cell of a growing policy, the seeds in its forward pass at the end
(:func:`esper_core.run.summary.final_architecture`) are installed at birth by
``policies.static`` in a cell of the same task and seed: the same host init, data order
and seed init, the final architecture from epoch 0. Its label is
``<policy>.static-final``, so every table answers "is growing better than just training
what you end with?".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import attrs

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.result_key import FIXED_ARCHITECTURE
from esper_core.config import RunConfig, config_to_dict
from esper_core.converter import structure
from esper_core.plugins import PluginManager
from esper_core.run.resolve import resolve
from esper_core.run.run_dir import SUMMARY
from esper_core.run.summary import final_architecture

STATIC_FINAL = "static-final"
STATIC_POLICY = "static"


def static_label(policy: str) -> str:
    return f"{policy}.{STATIC_FINAL}"


def growing(experiment: Experiment) -> list[str]:
    """Labels of the policies that get a static-final baseline."""
    if STATIC_FINAL not in experiment.baselines:
        return []
    return [p.label for p in experiment.policies if p.name not in FIXED_ARCHITECTURE]


def static_config(grown: RunConfig, architecture: Sequence[str], pm: PluginManager) -> RunConfig:
    """The grown cell's config with ``policies.static`` installing ``architecture``."""
    data = config_to_dict(grown)
    data.pop("schema_version", None)
    data["run"]["policy"] = STATIC_POLICY
    data.setdefault("policies", {})[STATIC_POLICY] = {"seeds": list(architecture)}
    return resolve(structure(data, RunConfig), pm).config


def static_cells(
    experiment: Experiment, cells: Sequence[Cell], root: Path, pm: PluginManager
) -> list[Cell]:
    """One static-final cell per finished cell of a growing policy."""
    policies = set(growing(experiment))
    out = []
    for cell in cells:
        directory = cell.directory(root)
        if cell.policy not in policies or cell_state(directory) is not CellState.COMPLETED:
            continue
        summary = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
        architecture = final_architecture(summary["seeds"])
        config = static_config(cell.config, architecture, pm)
        config = attrs.evolve(config, run=attrs.evolve(config.run, seed=cell.seed))
        out.append(Cell(cell.task, static_label(cell.policy), cell.seed, config))
    return out
