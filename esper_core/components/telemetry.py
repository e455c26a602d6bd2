"""The telemetry protocol: a backend receives every event of a run, in order.

A backend is a component class with ``name``, ``description`` and an attrs ``Options``
class, constructed as ``Backend(options, context)`` with a :class:`TelemetryContext`
and registered through ``esper_register_telemetry``. It may also implement
``state_dict()`` / ``load_state_dict(state)`` to resume where a checkpoint left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from attrs import frozen

if TYPE_CHECKING:
    from esper_core.run.telemetry import Event


@frozen
class TelemetryContext:
    """What a backend may know about the run it records."""

    run_dir: Path | None = None  # where files go; None when the run writes no directory
    quiet: bool = False  # no live display (--quiet, --json, run.quiet)
    # A new run (not a resume): a file already at a backend's path is someone else's, and
    # :meth:`path` refuses it rather than let the backend write over it.
    new_run: bool = False

    def path(self, relative: str | Path, backend: str) -> Path:
        """Where backend ``backend`` writes ``relative``: inside the run directory, or a
        one-line :class:`~esper_core.errors.RunDirError` (no run directory, or a path
        that escapes it through ``..`` or a symbolic link, or a file already there when
        the run is new)."""
        from esper_core.errors import RunDirError
        from esper_core.run.paths import inside_run_dir, refuse_overwrite

        if self.run_dir is None:
            raise RunDirError(
                f"telemetry backend {backend!r} writes files and needs a run directory"
            )
        path = inside_run_dir(self.run_dir, relative, f"telemetry backend {backend!r}: path")
        if self.new_run:
            refuse_overwrite(self.run_dir, relative)
        return path


@runtime_checkable
class TelemetryBackend(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    def handle(self, events: Sequence[Event]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
