"""Telemetry backends that fail on purpose, loaded with ``--plugin`` by the tests.

- ``exploding`` raises ``RuntimeError`` from ``handle`` once the run reaches an epoch:
  the hub must disable it, warn naming it, and let the run and the others go on.
- ``crash`` simulates the process dying at an epoch (a ``BaseException`` the hub does
  not catch) when ``RUN_DIR/crash-at`` names that epoch; it removes the file first,
  so the resumed run does not crash again. Its options never change, so a crashed and
  an uninterrupted run have identical configs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import TelemetryContext, hookimpl
from esper_core.run.telemetry import EpochCompleted, Event

CRASH_FILE = "crash-at"


class SimulatedCrash(BaseException):
    """Stands in for the process being killed mid-run."""


@define
class ExplodingOptions:
    at_epoch: int = 3


class ExplodingBackend:
    name: ClassVar[str] = "exploding"
    description: ClassVar[str] = "raises from handle() at an epoch"
    Options: ClassVar[type] = ExplodingOptions

    def __init__(self, options: ExplodingOptions, context: TelemetryContext) -> None:
        self.options = options
        self.calls = 0

    def handle(self, events: Sequence[Event]) -> None:
        self.calls += 1
        for event in events:
            if isinstance(event, EpochCompleted) and event.epoch >= self.options.at_epoch:
                raise RuntimeError(f"exploding backend reached epoch {event.epoch}")


@define
class CrashOptions:
    pass


class CrashBackend:
    name: ClassVar[str] = "crash"
    description: ClassVar[str] = "kills the run at the epoch named in RUN_DIR/crash-at"
    Options: ClassVar[type] = CrashOptions

    def __init__(self, options: CrashOptions, context: TelemetryContext) -> None:
        assert context.run_dir is not None
        self.marker = context.run_dir / CRASH_FILE

    def handle(self, events: Sequence[Event]) -> None:
        if not self.marker.exists():
            return
        at = int(self.marker.read_text())
        for event in events:
            if isinstance(event, EpochCompleted) and event.epoch >= at:
                self.marker.unlink()
                raise SimulatedCrash(f"simulated crash at epoch {event.epoch}")


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(ExplodingBackend)
    register(CrashBackend)
