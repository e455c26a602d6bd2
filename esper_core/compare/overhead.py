"""What an ``esper compare`` command costs besides its runs: the part of the dry-run
estimate that does not grow with the number of runs.

A run's ``wall_time`` (and each task's benchmark, ``measured_cost``) starts inside a
worker process that is already running, with torch imported. The command itself also
starts Python, imports torch, builds each (task, policy) once to check it, and at the end
computes the bootstrap intervals and draws two figures (SciPy and matplotlib imported);
each pool of worker processes (the search's, the evaluation's, the static-final runs')
spawns its workers, each importing torch and the plugins, in parallel on their cores.

Measured with ``benchmarks/dry_run_estimate.py`` (BENCHMARKS.md): a comparison of one
digits run of one epoch (0.6 s inside its worker) took 23 s of CPU on the 2-core machine
the tasks' benchmarks were measured on, at the same load; ``python -c "import torch"``
and the esper plugins in a fresh worker take about 5 of them. CPU seconds, as the tasks'
costs are: a loaded machine's wall time is longer for both alike.
"""

from __future__ import annotations

# The command's own process: start, imports, the checks, statistics and figures.
COMMAND_SECONDS = 17.5
# One pool of worker processes started: spawn, imports of torch and the plugins.
POOL_SECONDS = 5.0


def overhead(pools: int) -> float:
    """Seconds a command that starts ``pools`` pools of workers spends outside its runs."""
    return COMMAND_SECONDS + POOL_SECONDS * pools if pools else 0.0
