"""The console backend's options: the ``[telemetry.console]`` table (and
``--telemetry-option console.KEY=VALUE``)."""

from __future__ import annotations

from attrs import define

from esper_core.config_limits import MAX_ENVS, MAX_EPOCHS, MAX_HISTORY, MAX_SECONDS, MAX_WIDTH
from esper_core.converter import in_range, options_field, relative_path


@define
class ConsoleOptions:
    refresh_per_second: float = options_field(
        4.0, in_range(0.1, 30), "Most redraws of the live display per second."
    )
    max_envs: int = options_field(
        16, in_range(1, MAX_ENVS, integer=True), "Env rows shown in the live table."
    )
    recent_events: int = options_field(
        6, in_range(0, MAX_HISTORY, integer=True), "Latest lifecycle events listed under the table."
    )
    transient: bool = options_field(
        True, doc="Clear the live display when the run ends (the run summary is printed after it)."
    )
    file: str | None = options_field(
        None, relative_path, "Write the display to this file (in the run directory), not stderr."
    )
    width: int | None = options_field(
        None,
        in_range(40, MAX_WIDTH, integer=True),
        "Display width in columns (default: the terminal's).",
    )
    force_terminal: bool | None = options_field(
        None, doc="Treat the output as a terminal (true) or not (false); default: detect it."
    )
    progress_epochs: int = options_field(
        5,
        in_range(0, MAX_EPOCHS, integer=True),
        "Off a terminal: a progress line every N epochs (0: none by epoch count).",
    )
    progress_seconds: float = options_field(
        30.0,
        in_range(0, MAX_SECONDS),
        "Off a terminal: a progress line when this many seconds passed since the last (0: none by time).",
    )
