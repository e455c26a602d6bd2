"""The cell-runner protocol: *where* the cells of ``esper compare`` run.

A runner component is a class with ``name``, ``description`` and an attrs ``Options``
class, constructed as ``Runner(options, context)`` with a :class:`RunnerContext` and
registered through ``esper_register_runners``. ``runners.local`` (the default) runs cells
in a pool of local processes; ``esper-ray`` runs them on a Ray cluster. A runner only
decides where :func:`esper_core.compare.cells.run_cell` is called: each call writes one
ordinary run directory, so every runner gives the same ``results.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from attrs import frozen

if TYPE_CHECKING:
    from esper_core.compare.cells import CellJob, CellOutcome


Pool = Callable[
    [Sequence["CellJob"], int, Callable[["CellOutcome"], None], Callable[[str], None]],
    list["CellOutcome"],
]


@frozen
class RunnerContext:
    """What a runner may know about the experiment: how many cells may run at once, and
    the core's local process pool (:func:`esper_core.compare.cells.run_cells`), handed in
    so that the registry of runners does not import the cell code."""

    jobs: int = 1
    pool: Pool | None = None


@runtime_checkable
class CellRunner(Protocol):
    """Runs cells somewhere and reports each outcome as it arrives."""

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    def run(
        self,
        jobs: Sequence[CellJob],
        on_outcome: Callable[[CellOutcome], None],
        notify: Callable[[str], None],
    ) -> list[CellOutcome]:
        """Run every job (``run_cell(job)``); call ``on_outcome`` as each ends. A Ctrl-C
        raises :class:`~esper_core.compare.cells.CellsInterrupted` once the running cells
        are stopped (checkpointed where the runner can)."""
        ...
