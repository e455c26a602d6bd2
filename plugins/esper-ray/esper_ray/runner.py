"""``runners.ray``: each cell of ``esper compare`` is one Ray task.

A task calls the same :func:`esper_core.compare.cells.run_cell` as the local process pool,
so a cell writes the same run directory and the experiment the same ``results.json``;
Ray only decides which machine runs it. Every machine must therefore see the experiment
directory at the same path (a shared filesystem) and have Esper and the experiment's
plugins installed.

With ``address`` unset a private Ray instance is started on this machine with ``--jobs``
CPUs and stopped afterwards; ``address = "auto"`` (or ``"ray://host:10001"``) joins a
running cluster, which is left running. A Ctrl-C cancels the running tasks (Ray stops
them with a KeyboardInterrupt: their cells keep their last checkpoint and are resumed by
the next run of the same command).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.compare.cells import CellJob, CellOutcome, CellsInterrupted, run_cell
from esper_core.components.runner import RunnerContext
from esper_core.converter import in_range, options_field
from esper_core.plugins import require_module

POLL_SECONDS = 0.5
# Passed on to the Ray workers of a private instance, so a cell sees what `esper` sees.
FORWARDED_ENV = ("ESPER_DISABLE_PLUGIN_AUTOLOAD", "OMP_NUM_THREADS", "WANDB_MODE")


@define
class RayOptions:
    address: str | None = options_field(
        None,
        doc='Cluster to join ("auto", "ray://head:10001"); unset: start a private local '
        "instance with --jobs CPUs.",
    )
    cpus_per_cell: float = options_field(
        1.0, in_range(0, 1024, lo_open=True), "CPUs Ray reserves for each cell."
    )
    gpus_per_cell: float = options_field(
        0.0, in_range(0, 64), "GPUs Ray reserves for each cell (set run.device too)."
    )
    namespace: str | None = options_field(None, doc="Ray namespace of the job (default: Ray's).")


class RayRunner:
    name: ClassVar[str] = "ray"
    description: ClassVar[str] = "cells as Ray tasks: a private local instance or a Ray cluster"
    Options: ClassVar[type] = RayOptions

    def __init__(self, options: RayOptions, context: RunnerContext) -> None:
        self.options = options
        self.jobs = context.jobs

    def _start(self, ray: Any) -> bool:
        """Connect to Ray; True when this runner started (and must stop) the instance."""
        if ray.is_initialized():
            return False
        o = self.options
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "namespace": o.namespace,
        }
        if o.address is None:
            env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
            # Workers of a private instance import what this process can (a plugin given
            # as pkg.module from the working directory, say); on a cluster the workers'
            # own environment decides.
            env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
            kwargs.update(
                num_cpus=max(1, int(self.jobs * o.cpus_per_cell)),
                runtime_env={"env_vars": env},
            )
        else:
            kwargs["address"] = o.address
        ray.init(**kwargs)
        return True

    def run(
        self,
        jobs: Sequence[CellJob],
        on_outcome: Callable[[CellOutcome], None],
        notify: Callable[[str], None],
    ) -> list[CellOutcome]:
        if not jobs:
            return []
        ray = require_module("ray", "runners.ray", "pip install 'esper-ray' (or pip install ray)")
        started = self._start(ray)
        remote = ray.remote(
            num_cpus=self.options.cpus_per_cell,
            num_gpus=self.options.gpus_per_cell,
            max_retries=0,
        )(run_cell)
        outcomes: list[CellOutcome] = []
        refs: dict[Any, CellJob] = {}
        try:
            refs = {remote.remote(job): job for job in jobs}
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=POLL_SECONDS)
                for ref in done:
                    outcomes.append(self._result(ray, ref, refs[ref]))
                    on_outcome(outcomes[-1])
        except KeyboardInterrupt:
            notify("Interrupt received: cancelling the running cells (their checkpoints stay).")
            for ref in refs:
                ray.cancel(ref)
            time.sleep(POLL_SECONDS)
            raise CellsInterrupted(
                "interrupted: finished cells are kept and running ones stopped at their last "
                "checkpoint; run the same command again to continue"
            ) from None
        finally:
            if started:
                ray.shutdown()
        return outcomes

    @staticmethod
    def _result(ray: Any, ref: Any, job: CellJob) -> CellOutcome:
        try:
            outcome: CellOutcome = ray.get(ref)
            return outcome
        except Exception as exc:  # the worker died, or Ray could not run the task
            return CellOutcome(
                job.directory, "failed", error=f"Ray task failed ({type(exc).__name__}: {exc})"
            )


@hookimpl
def esper_register_runners(register: Any) -> None:
    register(RayRunner)
