"""What a cell directory holds: its state, and the config it was run with.

A cell is an ordinary run directory. A ``summary.json`` saying ``completed`` makes it
finished; a checkpoint next to its ``config.toml`` makes it resumable; anything else is
broken (removed and run again). A finished or checkpointed cell is reused only when its
config matches the experiment's on every setting that decides a result.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

from esper_core.config import RunConfig, config_to_dict, load_config
from esper_core.errors import ConfigError
from esper_core.run.run_dir import CHECKPOINT, CONFIG, SUMMARY

# Settings that do not change a cell's result (display, telemetry backends): a finished or
# checkpointed cell is reused whatever they are. The thread count is not one of them: it
# changes the order of float sums, hence the last digits of every result.
NEUTRAL_KEYS = ("run.quiet", "run.telemetry")
NEUTRAL_SECTIONS = ("telemetry",)


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


def stored_config(directory: Path) -> RunConfig | None:
    """The config a cell directory was run with, or None if it has none or it is unreadable."""
    try:
        return load_config(directory / CONFIG)
    except ConfigError:
        return None


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def comparable(config: RunConfig) -> dict[str, Any]:
    """The settings that decide a cell's result, flattened to dotted keys."""
    data = config_to_dict(config)
    for section in NEUTRAL_SECTIONS:
        data.pop(section, None)
    return {k: v for k, v in _flatten(data).items() if k not in NEUTRAL_KEYS}


def _short(value: Any, limit: int = 48) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def config_differences(stored: RunConfig, planned: RunConfig) -> list[str]:
    a, b = comparable(stored), comparable(planned)
    return [
        f"{k}: {_short(a.get(k, '(unset)'))} there, {_short(b.get(k, '(unset)'))} now"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def can_resume(directory: Path, config: RunConfig) -> bool:
    """Whether the cell's checkpoint may be continued: it exists and its config matches."""
    if cell_state(directory) is not CellState.RESUMABLE:
        return False
    stored = stored_config(directory)
    return stored is not None and not config_differences(stored, config)
