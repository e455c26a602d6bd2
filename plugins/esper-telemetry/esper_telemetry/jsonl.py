"""``telemetry.jsonl``: every event, one JSON object per line, in ``RUN_DIR/events.jsonl``.

The file is the run's record: ``esper report`` and ``esper_core.run.telemetry.read_events``
read it back into typed events through the one converter of ``esper_core``. This plugin
also adds the ``esper report`` command to the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import TelemetryContext, hookimpl
from esper_core.converter import options_field
from esper_core.run.telemetry import Event, dumps
from esper_telemetry.files import EVENTS_FILE, AppendFile


@define
class JsonlOptions:
    fsync: bool = options_field(
        False, doc="fsync events.jsonl at every epoch (survives power loss; slower on some disks)."
    )


class JsonlBackend:
    """Writes each event as a line of ``events.jsonl``; lines reach the disk once per epoch."""

    name: ClassVar[str] = "jsonl"
    description: ClassVar[str] = "events.jsonl: every typed event, one JSON object per line"
    Options: ClassVar[type] = JsonlOptions

    def __init__(self, options: JsonlOptions, context: TelemetryContext) -> None:
        self.options = options
        self.file = AppendFile(context.path(EVENTS_FILE, self.name), fsync=options.fsync)

    def handle(self, events: Sequence[Event]) -> None:
        self.file.write("".join(dumps(event) + "\n" for event in events))

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def state_dict(self) -> dict[str, Any]:
        return self.file.state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.file.resume(state)


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(JsonlBackend)


@hookimpl
def esper_register_commands(cli: Any) -> None:
    """``esper report RUN_DIR``: figures and report.md from the events.jsonl written here."""
    from esper_telemetry.report.command import report

    cli.add_command(report)
