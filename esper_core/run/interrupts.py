"""Ctrl-C during a run: stop at the next epoch boundary with a checkpoint, not mid-epoch."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from esper_core.errors import EsperError


class Interrupted(EsperError):
    """The user interrupted the run; a checkpoint was written."""


class StopFlag:
    """Set by the first Ctrl-C: the loop stops at the next epoch boundary and checkpoints.
    A second Ctrl-C interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self, notify: Callable[[str], None]) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum: int, frame: Any) -> None:
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            notify(
                "Interrupt received: finishing this epoch, then writing a checkpoint (Ctrl-C again to abort)."
            )

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)
