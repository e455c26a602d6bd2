"""``runners.inline``: the cells of a comparison one after another in the test's own process.

The local runner spawns a pool of fresh interpreters for each batch of cells (the search,
the evaluation, the static-final baselines), which costs seconds of imports each time; an
end-to-end test of what `compare` does with the cells needs none of that. Each cell still
goes through :func:`esper_core.compare.cells.run_cell`, as on every runner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.compare.cells import CellJob, CellOutcome, run_cell
from esper_core.components.runner import RunnerContext

INLINE_RUNNER = "tests.inline_runner"


@define
class InlineOptions:
    """No options."""


class InlineRunner:
    name: ClassVar[str] = "inline"
    description: ClassVar[str] = "cells one after another in this process (tests)"
    Options: ClassVar[type] = InlineOptions

    def __init__(self, options: InlineOptions, context: RunnerContext) -> None:
        self.options = options

    def run(
        self,
        jobs: Sequence[CellJob],
        on_outcome: Callable[[CellOutcome], None],
        notify: Callable[[str], None],
    ) -> list[CellOutcome]:
        outcomes = []
        for job in jobs:
            outcomes.append(run_cell(job))
            on_outcome(outcomes[-1])
        return outcomes


@hookimpl
def esper_register_runners(register: Any) -> None:
    register(InlineRunner)
