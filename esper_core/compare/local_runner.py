"""``runners.local``: the cells in a pool of spawned processes on this machine (the default).

Registered by the core itself, like ``executors.serial``. Imports nothing heavy until a
cell runs, so listing plugins stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core.components.runner import RunnerContext
from esper_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from esper_core.compare.cells import CellJob, CellOutcome


@define
class LocalOptions:
    """No options: ``--jobs`` sets the number of processes."""


class LocalRunner:
    name: ClassVar[str] = "local"
    description: ClassVar[str] = "cells in --jobs spawned processes on this machine"
    Options: ClassVar[type] = LocalOptions

    def __init__(self, options: LocalOptions, context: RunnerContext) -> None:
        self.options = options
        self.workers = context.jobs

    def run(
        self,
        jobs: Sequence[CellJob],
        on_outcome: Callable[[CellOutcome], None],
        notify: Callable[[str], None],
    ) -> list[CellOutcome]:
        from esper_core.compare.cells import run_cells

        return run_cells(jobs, self.workers, on_outcome, notify)


@hookimpl
def esper_register_runners(register: Any) -> None:
    register(LocalRunner)
