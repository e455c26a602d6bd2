"""The ``static-final`` baseline: what a grown run ended with, trained from scratch.

For every finished cell of a growing policy, the seeds in its forward pass at the end
(:func:`esper_core.run.summary.final_architecture`) are installed at birth by
``policies.static`` in a cell of the same task and seed: the same host init, data order
and seed init, the final architecture from epoch 0. Its label is
``<policy>.static-final``, so every table answers "is growing better than just training
what you end with?".

A run whose host itself grew (a policy that grows online: the heuristic's or PPO's
``host_growth``) ended with another host: its twin starts that growth at epoch 0 with a
one-epoch ramp (``policies.static``'s ``widen_at = 0`` or ``deepen_at = 0``, ``identity``
blocks: fresh ones, as a host built deep would have), so it trains the grown host from
the first epoch. Seeds the run kept beside its grown host are installed on it at birth,
after that growth has folded (:mod:`esper_core.env.birth`), so they are the seeds the run
grew on its grown host. A run that kept more than one growth, or a seed born before its
host grew (built for the host as it was then), has no twin: :func:`why_no_twin` says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.cell_result import CellResult
from esper_core.compare.experiment import Cell, Experiment
from esper_core.compare.result_key import FIXED_ARCHITECTURE
from esper_core.config import RunConfig, config_to_dict
from esper_core.converter import structure
from esper_core.plugins import PluginManager
from esper_core.run.ledger import HostGrowthRecord
from esper_core.run.resolve import resolve
from esper_core.run.run_dir import SUMMARY
from esper_core.run.summary import final_architecture, final_seeds

STATIC_FINAL = "static-final"
STATIC_POLICY = "static"
KEPT_FATES = ("fossilized", "live")


def static_label(policy: str) -> str:
    return f"{policy}.{STATIC_FINAL}"


def growing(experiment: Experiment) -> list[str]:
    """Labels of the policies that get a static-final baseline."""
    if STATIC_FINAL not in experiment.baselines:
        return []
    return [p.label for p in experiment.policies if p.name not in FIXED_ARCHITECTURE]


def static_config(
    grown: RunConfig,
    architecture: Sequence[str],
    pm: PluginManager,
    host: dict[str, Any] | None = None,
) -> RunConfig:
    """The grown cell's config with ``policies.static`` installing ``architecture`` (and
    growing the host at epoch 0 as ``host``, :func:`host_at_birth`, says)."""
    data = config_to_dict(grown)
    data.pop("schema_version", None)
    data["run"]["policy"] = STATIC_POLICY
    data.setdefault("policies", {})[STATIC_POLICY] = {"seeds": list(architecture), **(host or {})}
    return resolve(structure(data, RunConfig), pm).config


def _kept(summary: dict[str, Any]) -> list[HostGrowthRecord]:
    return [
        structure(row, HostGrowthRecord)
        for row in summary.get("host_growths", [])
        # The episode final_architecture reads (a compare cell's one env and episode); a
        # growth still ramping at the end counts, as a seed left half-blended does.
        if row.get("fate") in KEPT_FATES and row["env"] == 0 and row["episode"] == 0
    ]


def why_no_twin(summary: dict[str, Any]) -> str | None:
    """Why the run whose ``summary`` this is has no static-final twin (None: it has one)."""
    kept = _kept(summary)
    if not kept:
        return None
    if len(kept) > 1:
        return f"its host kept {len(kept)} growths; a twin replays one at epoch 0"
    born = [s["germinated_epoch"] for s in final_seeds(summary["seeds"])]
    if born and (kept[0].ended_epoch is None or min(born) < kept[0].ended_epoch):
        return "it kept a seed born before its host grew; a twin installs seeds on the grown host"
    if kept[0].factor() is None:
        return "its host's dimensions grew by different factors"
    return None


def host_at_birth(summary: dict[str, Any]) -> dict[str, Any]:
    """``policies.static`` options that grow the host at epoch 0 as the run's one kept
    growth did (empty: the host did not grow); call only where :func:`why_no_twin` is None."""
    kept = _kept(summary)
    if not kept:
        return {}
    (record,) = kept
    factor = record.factor()
    assert factor is not None
    changed = [k for k, v in record.widths_before.items() if record.widths_after.get(k, v) != v]
    stages = [] if len(changed) == len(record.widths_before) else [_stage(k) for k in changed]
    if record.operator == "depth":
        return {
            "deepen_at": 0.0,
            "deepen_factor": round(factor),
            "deepen_mode": "identity",
            "deepen_stages": stages,
            "deepen_tempo": 1,
        }
    return {"widen_at": 0.0, "widen_factor": factor, "widen_stages": stages, "widen_tempo": 1}


def _stage(key: str) -> int:
    """``stage2`` or ``stage2_layers`` -> 2."""
    return int(key.removeprefix("stage").split("_")[0])


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
        if why_no_twin(summary) is not None:
            continue
        architecture = final_architecture(summary["seeds"])
        config = static_config(cell.config, architecture, pm, host_at_birth(summary))
        config = attrs.evolve(config, run=attrs.evolve(config.run, seed=cell.seed))
        out.append(Cell(cell.task, static_label(cell.policy), cell.seed, config))
    return out


def no_twins(experiment: Experiment, results: Sequence[CellResult]) -> list[str]:
    """One line per finished run of a growing policy that has no static-final twin, and
    why: its row pairs fewer runs, and the results say which and why."""
    policies = set(growing(experiment))
    out = []
    for r in results:
        summary = Path(r.run_dir) / SUMMARY if r.run_dir else None
        if r.policy not in policies or summary is None or not summary.is_file():
            continue
        why = why_no_twin(json.loads(summary.read_text(encoding="utf-8")))
        if why is not None:
            out.append(
                f"{r.policy} on {r.task}, random seed {r.seed}, has no {STATIC_FINAL} twin: {why}"
            )
    return out
