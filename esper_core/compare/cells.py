"""Running the cells of a comparison experiment in parallel worker processes.

Each cell is an ordinary run directory written by :func:`esper_core.run.api.run`.
A cell whose ``summary.json`` says ``completed`` is never run again. Any other cell
directory is unfinished: if it holds a checkpoint and the config it was started with,
the cell is *resumed* from that checkpoint (the runner guarantees the same result as
an uninterrupted run); otherwise it is removed and run from scratch.

Workers are spawned processes in their own process group, so a terminal Ctrl-C
reaches only the parent; they start with SIGINT blocked, so one pressed while they
import is dropped rather than killing them (a traceback, a broken pool). The parent's
SIGINT handler counts Ctrl-Cs instead of raising KeyboardInterrupt, which, landing
inside the executor's bookkeeping, could leave a future's lock held and the parent
waiting forever. The first sets the pool's shared state to STOP; each worker turns it
into one SIGINT for itself, which the runner answers by finishing the epoch, writing a
checkpoint and stopping. A second sets ABORT: workers exit at once. The state is a
plain shared integer, with no lock: a worker interrupted while holding a lock shared
with the others left them all, and the parent, waiting forever. A worker whose parent
disappears (e.g. SIGKILL) exits too. A per-cell file lock keeps two processes (say, a
dying worker of a killed run and a new run) off the same cell.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from attrs import frozen

from esper_core.compare.cell_dirs import CellState, can_resume, cell_state
from esper_core.config import RunConfig
from esper_core.converter import structure
from esper_core.errors import CheckpointError, EsperError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.failures import explain, plugin_modules
from esper_core.run.interrupts import Interrupted

POLL_SECONDS = 0.2  # how often a worker checks its parent and the state; the parent its futures
EXIT_ABORTED = 130
# The pool's shared state, set by the parent only.
RUN, STOP, ABORT = 0, 1, 2


@frozen
class CellJob:
    """What a worker needs for one cell; plain data, so it pickles for spawned processes."""

    directory: str
    lock: str
    config: dict[str, Any]  # the unstructured, resolved RunConfig
    plugins: tuple[str, ...] = ()


@frozen
class CellOutcome:
    directory: str
    status: str  # completed | skipped (already finished) | interrupted | cancelled | failed
    resumed: bool = False
    restarted: bool = False  # an unfinished directory was removed and the cell run again
    error: str | None = None


# ---------------------------------------------------------------- worker side

# The pool's shared state as seen by THIS worker process, set once by the pool initializer
# (the only way to hand shared memory to a pool worker); None in every other process.
_worker_state: Any = None


def _watch(state: Any, parent: int) -> None:
    interrupted = False
    while True:
        time.sleep(POLL_SECONDS)
        if os.getppid() != parent or state.value == ABORT:
            os._exit(EXIT_ABORTED)
        if state.value == STOP and not interrupted:
            interrupted = True
            # One SIGINT: the runner finishes the epoch, checkpoints and raises Interrupted.
            os.kill(os.getpid(), signal.SIGINT)


def init_worker(state: Any, parent: int) -> None:
    global _worker_state
    os.setpgrp()  # a terminal Ctrl-C goes to the parent only; it stops us through `state`
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # idle between cells: nothing to stop
    # Spawned with SIGINT blocked; one pressed meanwhile is pending, and ignoring it above
    # discards it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _worker_state = state
    threading.Thread(
        target=_watch, args=(state, parent), daemon=True, name="esper-cell-watch"
    ).start()


def _stopping() -> bool:
    # A plain read of shared memory: the SIGINT that may interrupt it leaves no lock held.
    return _worker_state is not None and _worker_state.value != RUN


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def run_cell(job: CellJob) -> CellOutcome:
    """Run (or resume, or skip) one cell. Never raises for a failing run: the outcome says."""
    directory = Path(job.directory)
    # In a worker, the SIGINT of a stop request interrupts whatever runs until the runner
    # installs its own handler (which checkpoints at the epoch end instead).
    previous = signal.signal(signal.SIGINT, _interrupt) if _worker_state is not None else None
    pm: PluginManager | None = None
    try:
        if _stopping():
            return CellOutcome(job.directory, "cancelled")
        with _file_lock(Path(job.lock)):
            if cell_state(directory) is CellState.COMPLETED:
                return CellOutcome(job.directory, "skipped")
            config = structure(job.config, RunConfig)
            pm = PluginManager(extra=list(job.plugins))
            resume = can_resume(directory, config, pm)
            restarted = directory.exists() and not resume
            if restarted:
                shutil.rmtree(directory)

            def execute(resume: bool) -> None:
                api.run(
                    config, pm, run_dir=directory, resume=resume, quiet=True, notify=lambda _m: None
                )

            try:
                execute(resume)
            except (CheckpointError, RunDirError):
                if not resume:
                    raise
                # The checkpoint could not be continued: start the cell afresh.
                shutil.rmtree(directory)
                resume, restarted = False, True
                execute(False)
            return CellOutcome(job.directory, "completed", resumed=resume, restarted=restarted)
    except Interrupted:
        return CellOutcome(job.directory, "interrupted")
    except KeyboardInterrupt:
        if _worker_state is None:
            raise  # called in the user's own process: a Ctrl-C is theirs to handle
        return CellOutcome(job.directory, "interrupted")
    except EsperError as exc:
        return CellOutcome(job.directory, "failed", error=str(exc))
    except Exception as exc:  # a bug or a numerical failure in one cell must not stop the others
        return CellOutcome(job.directory, "failed", error=_failure(exc, pm))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _failure(exc: Exception, pm: PluginManager | None) -> str:
    """One cell's failure as the command shows it: out-of-memory, dead workers, full disks
    and plugin exceptions explained as ``esper run`` would (the cell's own resume advice
    is left out: running the experiment again resumes it); a bug with its traceback's end."""
    explained = explain(exc, plugin_modules(pm) if pm is not None else {}, None, "run")
    if explained is not None:
        return str(explained)
    detail = "".join(traceback.format_exception(exc)[-3:]).strip()
    return f"{type(exc).__name__}: {exc}\n{detail}"


# ---------------------------------------------------------------- parent side


class CellsInterrupted(Interrupted):
    """The user stopped the experiment; finished cells are kept, running ones checkpointed."""


def run_cells(
    jobs: Sequence[CellJob],
    workers: int,
    on_outcome: Callable[[CellOutcome], None],
    notify: Callable[[str], None],
) -> list[CellOutcome]:
    """Run ``jobs`` on ``workers`` spawned processes; call ``on_outcome`` as each ends."""
    if not jobs:
        return []
    context = multiprocessing.get_context("spawn")
    state = context.RawValue("i", RUN)
    with _counted_interrupts(state) as interrupts:
        pool = ProcessPoolExecutor(
            max_workers=max(1, min(workers, len(jobs))),
            mp_context=context,
            initializer=init_worker,
            initargs=(state, os.getpid()),
        )
        try:
            # The workers start in the first submits. (The executor's queues have started
            # multiprocessing's resource tracker by now, whose start would unblock SIGINT.)
            with _sigint_blocked():
                futures = {pool.submit(run_cell, job): job for job in jobs}
            outcomes = _collect(futures, on_outcome, interrupts)
            if interrupts.count:
                _stop(futures, interrupts, notify)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    if interrupts.count:  # also one that came as the last cells ended
        raise CellsInterrupted(
            "interrupted: finished cells are kept and running ones were checkpointed; "
            "run the same command again to continue"
        )
    return outcomes


class _Interrupts:
    """The Ctrl-Cs received while the pool runs, counted by the SIGINT handler."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.count = 0

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        # Set here rather than by the loop: the workers stop even while this process is
        # busy elsewhere (an outcome's callback, the pool's shutdown).
        self.state.value = STOP if self.count == 1 else ABORT


@contextlib.contextmanager
def _counted_interrupts(state: Any) -> Iterator[_Interrupts]:
    interrupts = _Interrupts(state)
    if threading.current_thread() is not threading.main_thread():
        yield interrupts  # a Ctrl-C reaches the main thread only
        return
    previous = signal.signal(signal.SIGINT, interrupts)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Processes spawned in here start with SIGINT blocked (see :func:`init_worker`); one
    that arrives meanwhile is counted on leaving."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _collect(
    futures: dict[Future[CellOutcome], CellJob],
    on_outcome: Callable[[CellOutcome], None],
    interrupts: _Interrupts,
) -> list[CellOutcome]:
    """The outcomes as the cells end, until all have or a Ctrl-C comes."""
    outcomes: list[CellOutcome] = []
    pending = set(futures)
    while pending and not interrupts.count:
        done, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
        for future in done:
            outcomes.append(_result(future, futures[future]))
            on_outcome(outcomes[-1])
    return outcomes


def _stop(
    futures: dict[Future[CellOutcome], CellJob],
    interrupts: _Interrupts,
    notify: Callable[[str], None],
) -> None:
    """Wait for every cell to end: a running one at its epoch's end (its worker was told by
    the SIGINT handler), a queued one at once, or all on a second Ctrl-C (workers exit)."""
    notify(
        "Interrupt received: running cells finish their epoch and write a checkpoint "
        "(Ctrl-C again to abort them)."
    )
    # The queued cells are not cancelled here but by their workers: Python 3.11's executor
    # loses its manager thread, with a traceback, when the pool breaks (a second Ctrl-C)
    # while a cancelled future is queued (CPython gh-107219).
    aborting = False
    while not all(future.done() for future in futures):
        wait(list(futures), timeout=POLL_SECONDS)
        if interrupts.count > 1 and not aborting:
            aborting = True
            notify("Aborting the running cells.")


def _result(future: Future[CellOutcome], job: CellJob) -> CellOutcome:
    try:
        return future.result()
    except BrokenProcessPool as exc:
        return CellOutcome(
            job.directory, "failed", error=f"its worker process died ({exc}); run again to retry"
        )
    except KeyboardInterrupt:
        # The stop's SIGINT reached the worker just as its cell returned.
        return CellOutcome(job.directory, "interrupted")
