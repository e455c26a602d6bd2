"""One finished cell's contribution to a comparison, read from its ``summary.json``:
every number passes :func:`~esper_core.compare.cell_dirs.summary_number`, so a damaged
or forged summary is named rather than tabled."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import frozen

from esper_core.compare.cell_dirs import (
    MAX_WALL_TIME_S,
    CellState,
    cell_state,
    damaged,
    summary_number,
)
from esper_core.run.run_dir import SUMMARY

if TYPE_CHECKING:
    from esper_core.compare.experiment import Cell


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
    final_test_loss: float = 0.0
    params_forward: float = 0.0  # host + seeds blended in at the end
    params_held: float = 0.0  # host + every seed held at the end
    train_flops: float = 0.0  # forward + backward FLOPs of training (0: not recorded)
    seeds_germinated: int = 0
    growth_note: str | None = None  # why nothing was germinated, as the policy said
    # The final validation values: what a researcher chooses by (the frontier's sizes).
    # None: not recorded (a summary from before); a value() of NaN then.
    final_val_acc: float | None = None
    final_val_loss: float | None = None

    def value(self, metric: str) -> float:
        value = getattr(self, metric)
        return math.nan if value is None else float(value)


def read_cell(cell: Cell, root: Path) -> CellResult | None:
    directory = cell.directory(root)
    if cell_state(directory) is not CellState.COMPLETED:
        return None
    summary = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
    if summary.get("final_test_acc_mean") is None:
        return None

    def number(key: str, high: float = math.inf, **kind: bool) -> float:
        return summary_number(directory, summary, key, high, **kind)

    def optional(key: str, default: float, **kind: bool) -> float:
        return default if summary.get(key) is None else number(key, **kind)

    try:
        (episode,) = summary["episodes"]
        added = optional("params_added_mean", 0.0)
        host = optional("host_params", 0.0)
        return CellResult(
            task=cell.task,
            policy=cell.policy,
            seed=cell.seed,
            final_test_acc=number("final_test_acc_mean", 100.0),
            params_added=added,
            seeds_fossilized=int(number("seeds_fossilized", integer=True)),
            seeds_pruned=int(number("seeds_pruned", integer=True)),
            wall_time=number("wall_time", MAX_WALL_TIME_S),
            run_dir=str(directory),
            final_test_loss=summary_number(directory, episode, "final_test_loss", inf_ok=True),
            # Summaries written before the cost axes existed: every seed counted.
            params_forward=optional("params_forward_mean", host + added),
            params_held=optional("params_held_mean", host + added),
            train_flops=optional("train_flops_mean", 0.0),
            seeds_germinated=int(
                0
                if episode.get("seeds_germinated") is None
                else summary_number(directory, episode, "seeds_germinated", integer=True)
            ),
            growth_note=episode.get("growth_note"),
            final_val_acc=(
                None
                if summary.get("final_val_acc_mean") is None
                else number("final_val_acc_mean", 100.0)
            ),
            final_val_loss=(
                None
                if episode.get("final_val_loss") is None
                else summary_number(directory, episode, "final_val_loss", inf_ok=True)
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # also: not exactly one episode, or an episode that is not a table
        raise damaged(directory, f"{type(exc).__name__}: {exc}") from None
