"""``runners.local``: the cells in a pool of spawned processes on this machine (the default).

Registered by the core itself, like ``executors.serial``. The pool itself
(:func:`esper_core.compare.cells.run_cells`) comes in through the context, so the plugin
registry never imports the cell code (no import cycle, and listing plugins stays fast).
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
        if context.pool is None:
            raise ValueError("runners.local needs the core's process pool in its context")
        self.options = options
        self.workers = context.jobs
        self.pool = context.pool

    def run(
        self,
        jobs: Sequence[CellJob],
        on_outcome: Callable[[CellOutcome], None],
        notify: Callable[[str], None],
    ) -> list[CellOutcome]:
        return self.pool(jobs, self.workers, on_outcome, notify)


@hookimpl
def esper_register_runners(register: Any) -> None:
    register(LocalRunner)
