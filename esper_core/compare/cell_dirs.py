"""What a cell directory holds: its state, and the config it was run with.

A cell is an ordinary run directory. A ``summary.json`` saying ``completed`` makes it
finished; a checkpoint next to its ``config.toml`` makes it resumable; anything else is
broken (removed and run again). A finished or checkpointed cell is reused only when its
config matches the experiment's on every setting that decides a result
(:mod:`esper_core.compare.result_key`).
"""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

from esper_core.compare.result_key import config_differences
from esper_core.config import RunConfig, load_config
from esper_core.errors import ConfigError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.resolve import with_new_option_defaults
from esper_core.run.run_dir import CHECKPOINT, CONFIG, SUMMARY


class CellState(enum.Enum):
    MISSING = "missing"
    COMPLETED = "completed"
    RESUMABLE = "resumable"  # has a checkpoint and its config: may continue
    BROKEN = "broken"  # anything else: removed and run again


def _summary_status(directory: Path) -> str | None:
    try:
        return str(json.loads((directory / SUMMARY).read_text(encoding="utf-8")).get("status"))
    except (OSError, ValueError, AttributeError):
        return None


def cell_state(directory: Path) -> CellState:
    if not directory.exists():
        return CellState.MISSING
    if _summary_status(directory) == "completed":
        return CellState.COMPLETED
    if (directory / CHECKPOINT).is_file() and (directory / CONFIG).is_file():
        return CellState.RESUMABLE
    return CellState.BROKEN


def stored_config(directory: Path, pm: PluginManager) -> RunConfig | None:
    """The config a cell directory was run with, with the defaults of the options its
    components gained since (so adding an option does not make every finished cell run
    again), or None if it has none or it is unreadable."""
    try:
        stored = load_config(directory / CONFIG)
    except ConfigError:
        return None
    return with_new_option_defaults(stored, pm)


def finished_as_planned(directory: Path, config: RunConfig, pm: PluginManager) -> bool:
    """The cell ran to the end with ``config``: it is read, not run again (one made with
    other settings runs again)."""
    if cell_state(directory) is not CellState.COMPLETED:
        return False
    stored = stored_config(directory, pm)
    return stored is not None and not config_differences(stored, config)


def can_resume(directory: Path, config: RunConfig, pm: PluginManager) -> bool:
    """Whether the cell's checkpoint may be continued: it exists and its config matches."""
    if cell_state(directory) is not CellState.RESUMABLE:
        return False
    stored = stored_config(directory, pm)
    return stored is not None and not config_differences(stored, config)


def damaged(directory: Path, why: str) -> RunDirError:
    """A finished cell is never run again, so a summary that cannot be right must be named."""
    return RunDirError(
        f"{directory / SUMMARY} is damaged ({why}); delete that run directory to run the cell again"
    )


# The longest wall time a finished run's summary may claim (about 32 years): more is a
# forged or corrupted summary, whose figure would make the --dry-run estimate absurd.
MAX_WALL_TIME_S = 1e9


def summary_number(
    directory: Path,
    summary: dict[str, Any],
    key: str,
    high: float = math.inf,
    *,
    integer: bool = False,
    inf_ok: bool = False,
) -> float:
    """``summary[key]``: a number in [0, ``high``] (an integer with ``integer``), finite
    unless ``inf_ok`` (a diverged run's test loss); anything else is the
    :func:`damaged` error. Every number a comparison reads from a finished cell passes
    here: a hand-edited NaN, a negative count or an accuracy of 1e300 would otherwise
    enter its tables (and the --dry-run estimate) as if measured."""
    value = summary.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        whole = isinstance(value, int) or not integer or value.is_integer()
        if whole and 0 <= value <= high and (inf_ok or not math.isinf(value)):
            return float(value)
    expected = "a whole number" if integer else "a number"
    bound = f"in [0, {high:g}]" if high != math.inf else ">= 0"
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    raise damaged(directory, f"{key} = {shown}, but a run writes {expected} {bound}")
