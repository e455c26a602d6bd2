"""A watchdog for run code that never returns.

A reward stuck in a loop, or a blueprint's forward waiting on something that never
comes, used to hang a run forever. :class:`Watchdog` bounds each unit of a run's loop
(an epoch, the resets of an episode, a policy update, an evaluation) by
``run.epoch_timeout`` seconds. It belongs to one run: :func:`~esper_core.run.api.drive`
makes it, the loop arms it around each unit and says which phase it is in, and on
expiry its timer thread interrupts the run's thread. The interrupted code raises
:class:`Expired`, whose traceback names the plugin that was running; ``drive`` turns it
into a one-line :class:`RunTimeoutError`. Nothing is written after the interruption, so
the last checkpoint stays the one to resume from.

How the run's thread is interrupted:

* the main thread (the CLI, a compare worker): ``SIGINT`` sent to that thread alone
  (``signal.pthread_kill``), caught by a handler that wraps the one in place (the run's
  Ctrl-C handler). A real signal also wakes a blocking call (``time.sleep``, a lock, a
  socket), which a flag checked between bytecodes would not. SIGINT rather than a signal
  of its own: the run already owns SIGINT's handler, and SIGALRM belongs to others
  (pytest-timeout);
* any other thread (the library API called from a worker thread), or where
  ``pthread_kill`` does not exist: the exception is set asynchronously on that thread
  (``PyThreadState_SetAsyncExc``); it fires at the next bytecode, so a blocking call
  ends first.

Code stuck inside one C call (a torch kernel that never returns) cannot be interrupted
from Python at all; the watchdog then fires again every few seconds, in vain.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

from esper_core.errors import EsperError

# After firing, the interrupt is sent again this often while the unit is still running:
# the first may have been swallowed (a bare ``except BaseException``) or be waiting for a
# C call to return.
RESEND_SECONDS = 2.0


class Expired(BaseException):
    """Raised in the run's thread when a unit ran past its limit. A BaseException (like
    KeyboardInterrupt), so that a plugin's ``except Exception`` does not swallow it."""


class RunTimeoutError(EsperError):
    """An epoch (or another unit of a run) ran longer than ``run.epoch_timeout``."""


Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Watchdog:
    """One run's watchdog; ``limit`` seconds per unit, 0 for none. Use it as a context
    manager around the loop (it starts its thread and installs its handler there), and
    :meth:`watching` around each unit."""

    def __init__(self, limit: float) -> None:
        self.limit = float(limit)
        self.phase = "starting"  # what the loop is doing; set by the loop
        self.unit = ""  # e.g. "epoch 4 of episode 0"; set by watching()
        self.fired: str | None = None  # "UNIT, in PHASE" as it was when the limit passed
        self._deadline: float | None = None
        self._closed = False
        self._wake = threading.Condition()
        self._target = threading.get_ident()
        self._in_main = False
        self._previous: Handler = None
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def __enter__(self) -> Watchdog:
        if not self.enabled:
            return self
        self._target = threading.get_ident()
        self._in_main = threading.current_thread() is threading.main_thread() and hasattr(
            signal, "pthread_kill"
        )
        if self._in_main:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        self._thread = threading.Thread(target=self._watch, daemon=True, name="esper-watchdog")
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            return
        with self._wake:
            self._closed, self._deadline = True, None
            self._wake.notify_all()
        self._thread.join()
        if self._in_main:
            signal.signal(signal.SIGINT, self._previous)

    @contextlib.contextmanager
    def watching(self, unit: str) -> Iterator[None]:
        """Arm the watchdog for one unit of the run (``unit`` names it in the message)."""
        if not self.enabled:
            yield
            return
        with self._wake:
            self.unit, self.fired = unit, None
            self._deadline = time.monotonic() + self.limit
            self._wake.notify_all()
        try:
            yield
        finally:
            with self._wake:
                self._deadline = None

    def _watch(self) -> None:
        with self._wake:
            while not self._closed:
                deadline = self._deadline
                if deadline is None:
                    self._wake.wait()
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                # Fired under the lock: a unit that ends now disarms only after this, and
                # the interrupt then finds the armed state it was sent for.
                if self.fired is None:
                    self.fired = f"{self.unit}, in {self.phase}"
                self._deadline = time.monotonic() + RESEND_SECONDS
                self._interrupt()

    def _interrupt(self) -> None:
        if self._in_main:
            signal.pthread_kill(self._target, signal.SIGINT)
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self._target), ctypes.py_object(Expired)
        )

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.fired is not None:
            if self._deadline is not None:  # still inside the unit that ran too long
                raise Expired(self.fired)
            return  # a late copy of our own interrupt, after the unit ended: nothing to do
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt


# The watchdog of the run being built (set by drive around its start), for the code a
# plugin runs then on a user's behalf: only that is bounded, so building many envs or
# importing torch on a loaded machine is not mistaken for a hang.
_building: Watchdog | None = None


@contextlib.contextmanager
def building(watchdog: Watchdog) -> Iterator[None]:
    """While the run is built, :func:`supervised` code is bounded by ``watchdog``."""
    global _building
    _building = watchdog
    try:
        yield
    finally:
        _building = None


@contextlib.contextmanager
def supervised(unit: str) -> Iterator[None]:
    """Bound ``unit`` (a function a user named, such as ``tasks.dataset.data``) by
    ``run.epoch_timeout`` while a run is being built; elsewhere (the run's loop, whose
    units are bounded already, or the library API) it runs as it is."""
    watchdog = _building
    if watchdog is None or not watchdog.enabled:
        yield
        return
    watchdog.phase = "the run's start"
    with watchdog.watching(unit):
        yield
