"""The ``size-sweep`` baseline: static hosts of several sizes, the frontier growth must beat.

Each ``[[sweep.sizes]]`` entry of the experiment is a set of task options (``base_channels
= 8``) merged over each task's options, and optionally a partial run config merged over
the shared one (``{ env = { max_epochs = 30 } }``): the sweep spans sizes and training
lengths, one static model per entry. Every (entry, task, seed) is one ordinary cell of
policy ``wait`` (the host alone, never grown), on the same seeds as the policies, labelled
``sweep.LABEL``. The options are checked by the task itself when the cells are planned,
before any cell runs. The frontier's FLOPs axis is each cell's measured training FLOPs,
so a longer run is a costlier point without anything said about its length. :mod:`esper_core.compare.frontier` turns the finished cells into the
frontier and the verdict on every policy, in the task's metric
(:mod:`esper_core.compare.metric`).
"""

from __future__ import annotations

from esper_core.compare.experiment import Arm, Experiment
from esper_core.config_io import merge

SWEEP_POLICY = "wait"  # the host alone: what a researcher picking a static size trains


def sweep_arms(experiment: Experiment) -> list[tuple[Arm, Arm]]:
    """(task with the size's options, policy ``wait`` labelled ``sweep.LABEL`` carrying the
    size's run config) per size and task, tasks first: the cells of one seed run in this
    order after the policies'."""
    out = []
    for task in experiment.tasks:
        for size in experiment.sweep:
            if size.applies_to(task.label):
                sized = Arm(task.label, task.spec, task.name, merge(task.options, size.options))
                point = Arm(size.label, SWEEP_POLICY, SWEEP_POLICY, config=dict(size.config))
                out.append((sized, point))
    return out


def sweep_labels(experiment: Experiment) -> list[str]:
    return [size.label for size in experiment.sweep]
