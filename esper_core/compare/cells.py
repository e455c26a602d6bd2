"""Running the cells of a comparison experiment in parallel worker processes.

Each cell is an ordinary run directory written by :func:`esper_core.run.api.run`.
A cell whose ``summary.json`` says ``completed`` is never run again. Any other cell
directory is unfinished: if it holds a checkpoint and the config it was started with,
the cell is *resumed* from that checkpoint (the runner guarantees the same result as
an uninterrupted run); otherwise it is removed and run from scratch.

Workers are spawned processes in their own process group, so a terminal Ctrl-C
reaches only the parent. The parent then sets a stop event; each worker turns it into
one SIGINT for itself, which the runner answers by finishing the epoch, writing a
checkpoint and stopping. A second Ctrl-C sets the abort event: workers exit at once.
A worker whose parent disappears (e.g. SIGKILL) exits too. A per-cell file lock keeps
two processes (say, a dying worker of a killed run and a new run) off the same cell.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import threading
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

POLL_SECONDS = 0.2  # how often a worker checks its parent is alive
EXIT_ABORTED = 130


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

# The stop event of THIS worker process, set once by the pool initializer (the only way to
# hand a multiprocessing Event to a pool worker); None in every other process.
_worker_stop: Any = None


def _watch(stop: Any, abort: Any, parent: int) -> None:
    while not stop.wait(POLL_SECONDS):
        if os.getppid() != parent:
            os._exit(EXIT_ABORTED)
    # One SIGINT: the runner finishes the epoch, checkpoints and raises Interrupted.
    os.kill(os.getpid(), signal.SIGINT)
    while not abort.wait(POLL_SECONDS):
        if os.getppid() != parent:
            os._exit(EXIT_ABORTED)
    os._exit(EXIT_ABORTED)


def init_worker(stop: Any, abort: Any, parent: int) -> None:
    global _worker_stop
    os.setpgrp()  # a terminal Ctrl-C goes to the parent only; it stops us through `stop`
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # idle between cells: nothing to stop
    _worker_stop = stop
    threading.Thread(
        target=_watch, args=(stop, abort, parent), daemon=True, name="esper-cell-watch"
    ).start()


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
    previous = signal.signal(signal.SIGINT, _interrupt) if _worker_stop is not None else None
    pm: PluginManager | None = None
    try:
        if _worker_stop is not None and _worker_stop.is_set():
            return CellOutcome(job.directory, "cancelled")
        with _file_lock(Path(job.lock)):
            if cell_state(directory) is CellState.COMPLETED:
                return CellOutcome(job.directory, "skipped")
            config = structure(job.config, RunConfig)
            pm = PluginManager(extra=list(job.plugins))
            resume = can_resume(directory, config)
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
        if _worker_stop is None:
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
    stop, abort = context.Event(), context.Event()
    outcomes: list[CellOutcome] = []
    pool = ProcessPoolExecutor(
        max_workers=max(1, min(workers, len(jobs))),
        mp_context=context,
        initializer=init_worker,
        initargs=(stop, abort, os.getpid()),
    )
    futures: dict[Future[CellOutcome], CellJob] = {}
    try:
        futures = {pool.submit(run_cell, job): job for job in jobs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                outcomes.append(_result(future, futures[future]))
                on_outcome(outcomes[-1])
    except KeyboardInterrupt:
        stop.set()
        notify(
            "Interrupt received: running cells finish their epoch and write a checkpoint "
            "(Ctrl-C again to abort them)."
        )
        for future in futures:
            future.cancel()
        try:
            wait(list(futures))
        except KeyboardInterrupt:
            abort.set()
            notify("Aborting the running cells.")
        raise CellsInterrupted(
            "interrupted: finished cells are kept and running ones were checkpointed; "
            "run the same command again to continue"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _result(future: Future[CellOutcome], job: CellJob) -> CellOutcome:
    try:
        return future.result()
    except BrokenProcessPool as exc:
        return CellOutcome(
            job.directory, "failed", error=f"its worker process died ({exc}); run again to retry"
        )
