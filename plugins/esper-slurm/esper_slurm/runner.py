"""``runners.slurm``: each cell of ``esper compare`` is one SLURM job, submitted with
submitit as one job array.

A job calls the same :func:`esper_core.compare.cells.run_cell` as the local process pool:
each cell writes the same run directory, and the experiment the same ``results.json``.
The experiment directory must be on a filesystem the compute nodes mount at the same path,
and the nodes need the same Python environment (Esper and the experiment's plugins).

``cluster`` picks submitit's executor: unset means SLURM when ``sbatch`` is available and
local processes otherwise; ``"local"`` runs the jobs as local processes through the same
submitit code path (what the tests use); ``"debug"`` runs them in this process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import hookimpl
from esper_core.compare.cells import CellJob, CellOutcome, CellsInterrupted, run_cell
from esper_core.components.runner import RunnerContext
from esper_core.converter import in_range, one_of, options_field
from esper_core.plugins import require_module

POLL_SECONDS = 1.0


@define
class SlurmOptions:
    cluster: str | None = options_field(
        None,
        one_of("slurm", "local", "debug"),
        "submitit executor: slurm, local or debug (unset: slurm where sbatch exists).",
    )
    folder: str = options_field(
        "submitit-logs", doc="Directory of submitit's job files and logs (on shared storage)."
    )
    partition: str | None = options_field(None, doc="SLURM partition (sbatch --partition).")
    timeout_min: int = options_field(
        60, in_range(1, 60 * 24 * 30, integer=True), "Time limit of each cell's job, minutes."
    )
    cpus_per_cell: int = options_field(
        1, in_range(1, 1024, integer=True), "CPUs per job (keep run.threads at or below it)."
    )
    gpus_per_cell: int = options_field(0, in_range(0, 64, integer=True), "GPUs per job.")
    mem_gb: float = options_field(4.0, in_range(0, 4096, lo_open=True), "Memory per job, GB.")
    extra: dict[str, Any] = options_field(
        {}, doc="More sbatch settings, as submitit's slurm_additional_parameters."
    )


class SlurmRunner:
    name: ClassVar[str] = "slurm"
    description: ClassVar[str] = "cells as SLURM jobs (one job array) through submitit"
    Options: ClassVar[type] = SlurmOptions

    def __init__(self, options: SlurmOptions, context: RunnerContext) -> None:
        self.options = options
        self.jobs = context.jobs

    def _executor(self) -> Any:
        o = self.options
        executor = require_module(
            "submitit", "runners.slurm", "pip install 'esper-slurm' (or pip install submitit)"
        ).AutoExecutor(folder=o.folder, cluster=o.cluster)
        parameters: dict[str, Any] = {
            "timeout_min": o.timeout_min,
            "cpus_per_task": o.cpus_per_cell,
            "gpus_per_node": o.gpus_per_cell,
            "mem_gb": o.mem_gb,
            "name": "esper-cell",
            "slurm_array_parallelism": self.jobs,
        }
        if o.partition is not None:
            parameters["slurm_partition"] = o.partition
        if o.extra:
            parameters["slurm_additional_parameters"] = dict(o.extra)
        executor.update_parameters(**parameters)
        return executor

    def run(
        self,
        jobs: Sequence[CellJob],
        on_outcome: Callable[[CellOutcome], None],
        notify: Callable[[str], None],
    ) -> list[CellOutcome]:
        if not jobs:
            return []
        executor = self._executor()
        # submitit's local executor runs every job at once: submit --jobs at a time there.
        limit = self.jobs if executor.cluster in ("local", "debug") else len(jobs)
        queue = list(jobs)
        running: dict[Any, CellJob] = {}
        outcomes: list[CellOutcome] = []
        try:
            while queue or running:
                while queue and len(running) < limit:
                    batch = queue[: limit - len(running)]
                    del queue[: len(batch)]
                    submitted = executor.map_array(run_cell, batch)
                    running.update(zip(submitted, batch))
                for handle in [h for h in running if h.done()]:
                    outcomes.append(self._result(handle, running.pop(handle)))
                    on_outcome(outcomes[-1])
                if running:
                    time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            notify("Interrupt received: cancelling the submitted cells (their checkpoints stay).")
            for handle in running:
                handle.cancel(check=False)
            raise CellsInterrupted(
                "interrupted: finished cells are kept and running ones stopped at their last "
                "checkpoint; run the same command again to continue"
            ) from None
        return outcomes

    @staticmethod
    def _result(handle: Any, job: CellJob) -> CellOutcome:
        try:
            outcome: CellOutcome = handle.result()
            return outcome
        except Exception as exc:  # the job failed outside run_cell (killed, timed out, ...)
            detail = " ".join(str(exc).split())[:300]
            return CellOutcome(
                job.directory, "failed", error=f"job {handle.job_id} failed: {detail}"
            )


@hookimpl
def esper_register_runners(register: Any) -> None:
    register(SlurmRunner)
