"""A Ctrl-C during ``run_cells`` ends it promptly, wherever the signal lands.

`esper compare --jobs 2` once hung after a Ctrl-C: a KeyboardInterrupt raised in the middle
of acquiring locks leaves one held, and what waits for it waits forever. Each scenario
puts the signal at such a moment, deterministically (a trace or profile hook raises it),
in a process of its own: a hang there is a failed test, not a hung test run.
"""

from __future__ import annotations

import faulthandler
import json
import linecache
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from esper_core.compare import cells
from tests.plugin_set import REPO, subprocess_env

CELL_SECONDS = 0.5  # a fake cell's run: long enough to be running at the Ctrl-C
# Generous bounds (a loaded CI machine): the hang a scenario catches lasts forever.
SCENARIO_SECONDS = 45
EXIT_SECONDS = 60
CELLS = 6


def _finished_cells(root: Path, count: int) -> list[cells.CellJob]:
    """Cells already run: a worker reads their summary, skips them and asks for the next."""
    jobs = []
    for index in range(count):
        directory = root / "cells" / str(index)
        directory.mkdir(parents=True)
        (directory / "summary.json").write_text(json.dumps({"status": "completed"}))
        jobs.append(cells.CellJob(str(directory), str(root / "locks" / str(index)), {}))
    return jobs


def _give_up_later() -> None:
    """In the scenario's process: end it, and the workers it may have started (in process
    groups of their own, so a timeout in the test would leave them behind), once it hangs."""

    def give_up() -> None:
        time.sleep(SCENARIO_SECONDS)
        for child in multiprocessing.active_children():
            child.kill()
        print(
            "run_cells never returned after the Ctrl-C; its threads:", file=sys.stderr, flush=True
        )
        faulthandler.dump_traceback(sys.stderr)
        os._exit(3)

    threading.Thread(target=give_up, daemon=True).start()


# ---------------------------------------------------------------- the parent's bookkeeping


def _slow_cell(job: cells.CellJob) -> cells.CellOutcome:
    time.sleep(CELL_SECONDS)
    return cells.CellOutcome(job.directory, "completed")


class _ThreadPool(ThreadPoolExecutor):
    """The pool in threads, each cell a short sleep: the scenario is the parent's side."""

    def __init__(self, max_workers: int, **_process_options: Any) -> None:
        super().__init__(max_workers)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        return super().submit(_slow_cell, *args)


def _sigint_between_future_locks(fired: list[bool]) -> Any:
    """A trace function raising SIGINT as ``wait`` takes the second of its futures' locks."""

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and "acquire()" in _line(frame):
            fired.append(True)
            if len(fired) == 2:  # the first future's lock is held
                sys.settrace(None)
                signal.raise_signal(signal.SIGINT)  # its handler runs before this returns
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_name == "__enter__" and code.co_filename.endswith("futures/_base.py"):
            return local
        return None

    return trace


def _line(frame: FrameType) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def ctrl_c_between_future_locks(root: Path) -> None:
    _give_up_later()
    cells.ProcessPoolExecutor = _ThreadPool  # type: ignore[misc,assignment]
    fired: list[bool] = []
    sys.settrace(_sigint_between_future_locks(fired))
    try:
        cells.run_cells(_finished_cells(root, 4), 2, lambda _o: None, lambda _m: None)
    except cells.CellsInterrupted:
        print("interrupted")
    finally:
        sys.settrace(None)
    assert len(fired) >= 2, "the signal never came: the scenario did not happen"


# ---------------------------------------------------------------- the workers


def traced_init_worker(*args: Any) -> None:
    """The pool's initializer, then a SIGINT just after the first multiprocessing lock this
    worker takes while its cell can be interrupted (a Python SIGINT handler in place): as
    the stop's SIGINT could land. A lock shared with the other processes, left held."""
    cells.init_worker(*args)
    sys.setprofile(_sigint_after_lock)


def _sigint_after_lock(frame: FrameType, event: str, arg: Any) -> None:
    if event != "c_return" or getattr(arg, "__name__", "") not in ("acquire", "__enter__"):
        return
    handler = signal.getsignal(signal.SIGINT)
    owner = type(getattr(arg, "__self__", None)).__name__
    if owner == "SemLock" and callable(handler) and handler is not signal.default_int_handler:
        sys.setprofile(None)
        signal.raise_signal(signal.SIGINT)  # raised here, with the lock held


def ctrl_c_in_a_worker_holding_a_lock(root: Path) -> None:
    _give_up_later()
    cells.init_worker = traced_init_worker  # type: ignore[assignment]
    outcomes = cells.run_cells(_finished_cells(root, CELLS), 2, lambda _o: None, lambda _m: None)
    print(" ".join(o.status for o in outcomes))


# ---------------------------------------------------------------- the tests


def _run_scenario(name: str, root: Path) -> subprocess.CompletedProcess[str]:
    code = f"import pathlib; from {__name__} import {name}; {name}(pathlib.Path({str(root)!r}))"
    try:
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=EXIT_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"run_cells never returned after the Ctrl-C: {exc.stderr}")


def test_a_ctrl_c_between_the_futures_locks_interrupts(tmp_path: Path) -> None:
    done = _run_scenario("ctrl_c_between_future_locks", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted", done.stdout + done.stderr


def test_no_worker_takes_a_shared_lock_while_its_cell_can_be_interrupted(tmp_path: Path) -> None:
    """Every cell skipped: no SIGINT came, as no such lock was taken. One that was (the stop
    event's) left the other worker, and the parent, waiting for it forever."""
    done = _run_scenario("ctrl_c_in_a_worker_holding_a_lock", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["skipped"] * CELLS, done.stdout + done.stderr
