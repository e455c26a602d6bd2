"""The cell runner an experiment names, built with its options checked.

Kept apart from :mod:`esper_core.compare.comparison` so that ``esper compare --dry-run``
checks the runner without importing the cell code, the statistics and the plots (SciPy
alone is most of a second): the local process pool is imported when cells first run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from esper_core.components.runner import RunnerContext
from esper_core.converter import structure
from esper_core.plugins import PluginManager

if TYPE_CHECKING:
    from esper_core.compare.cells import CellJob, CellOutcome


def local_pool(
    jobs: Sequence[CellJob],
    workers: int,
    on_outcome: Callable[[CellOutcome], None],
    notify: Callable[[str], None],
) -> list[CellOutcome]:
    """:func:`esper_core.compare.cells.run_cells`, imported when it is called."""
    from esper_core.compare.cells import run_cells

    return run_cells(jobs, workers, on_outcome, notify)


def make_runner(pm: PluginManager, name: str, options: dict[str, Any], jobs: int) -> Any:
    """The ``runners.NAME`` component with its options checked (before any cell starts)."""
    cls = pm.get("runners", name)
    context = RunnerContext(jobs=jobs, pool=local_pool)
    return cls(structure(options, cls.Options, path=f"runners.{name}"), context)


def threads_per_job(jobs: int) -> int:
    """torch threads for each of ``jobs`` parallel cells: the CPUs shared out, but never more
    than OMP_NUM_THREADS when the user set it (torch would honour it in a single run too)."""
    cpus = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    threads = max(1, cpus // max(1, jobs))
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads
