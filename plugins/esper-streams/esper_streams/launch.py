"""``esper run/train --nproc N``: N local worker processes, one rank each.

The workers are started with the standard library's ``spawn`` context (fresh
interpreters, no inherited CUDA state) and rendezvous through a file store in a private
temporary directory, so two jobs on one machine never compete for a port. Each worker
reports how it ended through a queue. When one fails the launcher gives the others a
moment to report, stops those still running, and raises one error naming the rank that
failed first (a :class:`PeerFailure` - "another rank stopped" - is never taken for the
cause while a real error is known). With ``torchrun`` none of this is used: torchrun
starts, watches and stops the workers itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from attrs import frozen

from esper_core.errors import ConfigError, EsperError
from esper_streams.errors import DistributedError, PeerFailure

# The rendezvous URL each worker joins (read by esper_streams.group).
INIT_METHOD_ENV = "ESPER_DIST_INIT"
POLL_SECONDS = 0.05
STOP_SECONDS = 5.0  # how long a worker gets to exit after SIGTERM before SIGKILL


@frozen
class Failure:
    rank: int
    kind: str  # exception class name, or "exit" when the worker died without a report
    message: str
    peer: bool = False  # caused by another rank's failure
    user: bool = False  # an EsperError: a one-line message is enough
    interrupted: bool = False


def _child(rank: int, nproc: int, init_method: str, job: Callable[[], Any], reports: Any) -> None:
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(nproc),
            INIT_METHOD_ENV: init_method,
        }
    )
    try:
        result = job()
    except BaseException as exc:  # reported to the launcher, whatever it was
        from esper_core.run.interrupts import Interrupted

        user = isinstance(exc, EsperError)
        if not user and not isinstance(exc, KeyboardInterrupt):
            print(f"[rank {rank}] worker failed:", file=sys.stderr)
            traceback.print_exc()
        reports.put(
            (
                "failed",
                rank,
                Failure(
                    rank,
                    type(exc).__name__,
                    str(exc),
                    peer=isinstance(exc, PeerFailure),
                    user=user,
                    interrupted=isinstance(exc, Interrupted | KeyboardInterrupt),
                ),
            )
        )
        reports.close()
        reports.join_thread()
        sys.exit(1)
    reports.put(("done", rank, result if rank == 0 else None))
    reports.close()
    reports.join_thread()
    _exit_without_teardown(0)


def _exit_without_teardown(code: int) -> None:
    """End a worker whose report is delivered, skipping interpreter finalization.

    A spawned worker otherwise runs the whole teardown (``sys.exit``), where C++ static
    destructors can meet a gloo thread still joinable and abort ("terminate called
    without an active exception", SIGABRT): a job that succeeded would be reported as a
    rank killed by signal 6. The worker's files are closed by the job itself; what is left
    to flush is its standard streams. ``multiprocessing``'s fork workers end the same way.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


@contextlib.contextmanager
def _first_interrupt_passed_to_workers(on_second: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C reaches every worker of the terminal's process group: the workers finish
    their epoch and checkpoint; the launcher keeps waiting. A second Ctrl-C stops all."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    count = 0

    def handler(signum: int, frame: Any) -> None:
        nonlocal count
        count += 1
        if count > 1:
            on_second()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def launch_local(
    nproc: int, job: Callable[[], Any], *, timeout: float, grace: float | None = None
) -> Any:
    """Run the picklable ``job`` once per rank in ``nproc`` processes; return rank 0's result.

    ``timeout`` bounds every collective inside the workers; after the first failure the
    others get ``grace`` seconds (default: min(timeout, 5)) to report before being stopped.
    """
    if nproc < 1:
        raise ConfigError([f"--nproc: expected a number of processes >= 1, got {nproc}"])
    grace = min(timeout, 5.0) if grace is None else grace
    ctx = multiprocessing.get_context("spawn")
    store_dir = tempfile.mkdtemp(prefix="esper-dist-")
    init_method = f"file://{os.path.join(store_dir, 'rendezvous')}"
    reports = ctx.Queue()
    procs = [
        ctx.Process(
            target=_child, args=(rank, nproc, init_method, job, reports), name=f"esper-rank-{rank}"
        )
        for rank in range(nproc)
    ]
    outcome = _Outcome(nproc)

    def stop_all() -> None:
        _stop(procs)

    try:
        with _first_interrupt_passed_to_workers(stop_all):
            for p in procs:
                p.start()
            deadline: float | None = None
            while any(p.exitcode is None for p in procs):
                outcome.read(reports, POLL_SECONDS)
                outcome.note_exits(procs)
                if outcome.failures and deadline is None:
                    deadline = time.monotonic() + grace
                if deadline is not None and time.monotonic() > deadline:
                    outcome.note_stopped(procs)
                    stop_all()
                    break
        for p in procs:
            p.join()
        outcome.drain(reports)
        outcome.note_exits(procs, final=True)
    finally:
        _stop(procs)
        reports.close()
        shutil.rmtree(store_dir, ignore_errors=True)
    if outcome.failures:
        raise outcome.error(timeout)
    if 0 not in outcome.results:
        raise DistributedError("rank 0 ended without reporting a result")
    return outcome.results[0]


def _stop(procs: list[Any]) -> None:
    alive = [p for p in procs if p.exitcode is None and p.pid is not None]
    for p in alive:
        p.terminate()
    end = time.monotonic() + STOP_SECONDS
    for p in alive:
        p.join(max(0.0, end - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join()


class _Outcome:
    """What the workers reported, in arrival order."""

    def __init__(self, nproc: int) -> None:
        self.nproc = nproc
        self.results: dict[int, Any] = {}
        self.failures: dict[int, Failure] = {}
        self.order: list[int] = []
        self.stopped: list[int] = []
        self._silent: dict[int, float] = {}

    def _add(self, message: tuple[str, int, Any]) -> None:
        status, rank, payload = message
        if status == "done":
            self.results[rank] = payload
        elif rank not in self.failures:
            self.failures[rank] = payload
            self.order.append(rank)

    def note_stopped(self, procs: list[Any]) -> None:
        """The ranks still running without a report when the grace ran out: the silent
        ones. A rank that reported its failure but was slow to exit is not among them."""
        self.stopped = [
            r for r, p in enumerate(procs) if p.exitcode is None and r not in self.failures
        ]

    def read(self, reports: Any, wait: float) -> None:
        try:
            self._add(reports.get(timeout=wait))
        except queue_module.Empty:
            return
        self.drain(reports)

    def drain(self, reports: Any) -> None:
        while True:
            try:
                self._add(reports.get(timeout=POLL_SECONDS))
            except queue_module.Empty:
                return

    def note_exits(self, procs: list[Any], final: bool = False) -> None:
        """A worker that exited badly without a report died hard (a signal, ``os._exit``).

        Its report may still be in the pipe, so until ``final`` a silent exit counts only
        once it has stayed silent for a second."""
        now = time.monotonic()
        for rank, p in enumerate(procs):
            code = p.exitcode
            if code is None or code == 0 or rank in self.failures or rank in self.stopped:
                continue
            first_seen = self._silent.setdefault(rank, now)
            if final or now - first_seen > 1.0:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
                self.failures[rank] = Failure(
                    rank, "exit", f"the worker process {how} without reporting an error"
                )
                self.order.append(rank)

    def error(self, timeout: float) -> EsperError:
        """One error naming the rank that caused the failure."""
        from esper_core.run.interrupts import Interrupted

        failures = [self.failures[r] for r in self.order]
        if all(f.interrupted for f in failures):
            return Interrupted(failures[0].message)
        causes = [f for f in failures if not f.peer and not f.interrupted]
        if causes:
            root = causes[0]
            text = f"rank {root.rank} of {self.nproc} failed: " + (
                root.message if root.user else f"{root.kind}: {root.message}"
            )
            others = sorted(({f.rank for f in failures} | set(self.stopped)) - {root.rank})
            if others:
                text += f" (rank {', '.join(map(str, others))} stopped as a consequence)"
            return DistributedError(text)
        first = failures[0]
        if self.stopped:
            silent = ", ".join(map(str, self.stopped))
            return DistributedError(
                f"rank {silent} of {self.nproc} did not answer within {timeout:g} s and was stopped "
                f"(hung or too slow; raise executors.distributed.timeout if it is only slow). "
                f"Rank {first.rank} reported: {first.message}"
            )
        return DistributedError(
            f"rank {first.rank} of {self.nproc} failed: {first.kind}: {first.message}"
        )
