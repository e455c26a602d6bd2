"""The telemetry hub: fans every event out to the run's backends, and decides what a
failing backend means for the run.

A backend that cannot write (an ``OSError``: full disk, read-only file system) or
cannot resume (an :class:`~esper_core.errors.EsperError`) fails the run, since going on
would silently lose its records; a backend with a bug (any other exception) is disabled
with a warning naming it, and the others carry on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from esper_core.errors import EsperError, RunDirError
from esper_core.run.checkpoint import disk_full_error, is_disk_full

if TYPE_CHECKING:
    from esper_core.run.telemetry import Event

log = logging.getLogger("esper.telemetry")


class Hub:
    """Fans events out to the enabled backends (each a
    :class:`~esper_core.components.telemetry.TelemetryBackend`); isolates backend bugs.

    A backend that raises ``OSError`` or an ``EsperError`` from any call fails the run
    with a one-line error; it gets no further call, so nothing more is written after
    the failure (a resume cuts its files back to the last checkpoint). A backend that
    raises anything else (``handle``, ``flush``, ``close``, ``state_dict``,
    ``load_state_dict``) is disabled with a warning naming it; the run and the other
    backends carry on, and the checkpoint records it as disabled, so that a resumed run
    keeps it disabled and leaves its files as they were. A disabled backend still gets
    one ``close()`` (its errors ignored) so it can release its files and the terminal.
    """

    _MISSING = object()

    def __init__(self, backends: Iterable[Any] = ()) -> None:
        self.backends: list[Any] = list(backends)
        self.disabled: dict[str, str] = {}
        # Whether the run has a checkpoint to resume from: the advice of a failed write
        # depends on it (before the first checkpoint there is nothing to resume).
        self.resumable = False

    def _call(self, backend: Any, method: str, *args: Any) -> Any:
        """``backend.method(*args)``; ``_MISSING`` if it has no such method or it raised."""
        fn = getattr(backend, method, None)
        if fn is None:
            return self._MISSING
        try:
            return fn(*args)
        except (OSError, EsperError) as exc:
            self.backends.remove(backend)  # no more calls: they could only write more damage
            raise _failure(_name(backend), method, exc, self.resumable) from exc
        except Exception as exc:  # a broken backend must not end a training run
            self._disable(backend, f"{type(exc).__name__}: {exc}", method != "close")
            return self._MISSING

    def _disable(self, backend: Any, reason: str, close: bool) -> None:
        name = _name(backend)
        self.disabled[name] = reason
        self.backends.remove(backend)
        log.warning("telemetry backend %r disabled after it raised %s", name, reason)
        closer = getattr(backend, "close", None)
        if close and closer is not None:
            with contextlib.suppress(Exception):  # already reported above
                closer()

    def emit(self, events: Sequence[Event]) -> None:
        if not events:
            return
        for backend in list(self.backends):
            self._call(backend, "handle", events)

    def flush(self) -> None:
        for backend in list(self.backends):
            self._call(backend, "flush")

    def close(self) -> None:
        failure: BaseException | None = None
        for backend in list(self.backends):
            try:  # every backend gets its close, even after another failed
                self._call(backend, "close")
            except EsperError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def state_dict(self) -> dict[str, Any]:
        """Resume positions of the backends that have them (e.g. file offsets), and the
        backends disabled so far."""
        positions: dict[str, Any] = {}
        for backend in list(self.backends):
            state = self._call(backend, "state_dict")
            if state is not self._MISSING:
                positions[_name(backend)] = state
        return {"backends": positions, "disabled": dict(self.disabled)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Give each backend its position; keep disabled what the checkpoint says was.

        A backend that keeps files must get a position: without one it would start its
        files afresh and lose what was recorded before the checkpoint.
        """
        positions: dict[str, Any] = state["backends"]
        for backend in list(self.backends):
            name = _name(backend)
            if name in state["disabled"]:
                reason = f"{state['disabled'][name]} (before the checkpoint; its files are left as they were)"
                self._disable(backend, reason, True)
            elif name in positions:
                self._call(backend, "load_state_dict", positions[name])
            elif callable(getattr(backend, "load_state_dict", None)):
                raise RunDirError(
                    f"the checkpoint holds no resume position for telemetry backend {name!r}, "
                    "so resuming would start its files afresh; resume with the backends the run "
                    "started with"
                )


def _name(backend: Any) -> str:
    return str(getattr(backend, "name", type(backend).__name__))


def _failure(name: str, method: str, exc: Exception, resumable: bool) -> EsperError:
    """The run-ending error for backend ``name`` whose ``method`` raised ``exc``."""
    if isinstance(exc, EsperError):
        return exc
    assert isinstance(exc, OSError)
    where = exc.filename or f"the files of telemetry backend {name!r}"
    advice = (
        "its records up to the last checkpoint are intact. Free some disk space and resume the run"
        if resumable
        else "no checkpoint was written yet, so there is nothing to resume. Free some disk "
        "space and start the run again"
    )
    if is_disk_full(exc):
        return disk_full_error(exc, where, advice)
    return RunDirError(
        f"telemetry backend {name!r} could not write ({method}: {exc}); the run stopped so "
        f"that no records are lost; {advice.split('. ')[0]}. Fix the cause and resume the run"
    )
