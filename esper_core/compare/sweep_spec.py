"""The size sweep as an experiment file states it, checked before any cell runs.

``[[sweep.sizes]]`` entries (:class:`SweepSize`) become :class:`SweepArm` values, one
sweep point each: a host size (task options) trained for one length (``config``, a
partial run config merged over the shared one), so one size at two lengths is two
points. :func:`resolve_sweep` reports every problem at once, one line each: a label that
is missing, repeated or no directory name, a task that is not the experiment's, a
``config`` that is no valid run config or sets what each cell sets itself.
:mod:`esper_core.compare.size_sweep` turns the arms into cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
from attrs import define, frozen

from esper_core.compare.labels import label_problem
from esper_core.config import RunConfig, config_to_dict
from esper_core.config_io import merge
from esper_core.converter import one_of, options_field, structure
from esper_core.errors import ConfigError

SIZE_SWEEP = "size-sweep"
SWEEP_PREFIX = "sweep."  # a size's label in tables and cell directories: sweep.LABEL
# What the comparison and its frontier are measured in: "auto" is test loss for a task
# that says it is a language model (Task.language_model), test accuracy otherwise.
FRONTIER_METRICS = ("auto", "accuracy", "loss")
# The run settings each cell sets itself (plan._cell_data): a sweep point's config may not
# set them, or they would be silently overridden.
CELL_RUN_KEYS = ("task", "policy", "seed", "episodes", "n_envs", "quiet", "threads")


@define
class SweepSize:
    """One static host size of the size-sweep baseline, trained for one length."""

    # Checked by resolve_sweep with the other sweep rules (missing, repeated, no name).
    label: str = options_field("", doc="Its name: cells and tables say sweep.LABEL.")
    options: dict[str, Any] = options_field(
        {}, doc="Task options merged over each task's options, e.g. { base_channels = 8 }."
    )
    tasks: list[str] = options_field(
        [], doc="Labels of the tasks this size is trained on (default: every task)."
    )
    config: dict[str, Any] = options_field(
        {},
        doc="A partial run config merged over the shared [config] for this size's cells, e.g. "
        "{ env = { max_epochs = 30 } }: the same size at another training length is "
        "another sweep point.",
    )


@define
class SweepFile:
    """The size-sweep baseline: for every size, task and seed, a cell of policy ``wait`` with
    the size's task options and run config; the same seeds as the policies."""

    sizes: list[SweepSize] = options_field([], doc="The static host sizes.")
    metric: str = options_field(
        "auto",
        one_of(*FRONTIER_METRICS),
        'What the comparison and its frontier are judged in: "accuracy" (higher is better), '
        '"loss" (test loss, lower is better) or "auto" (loss for a language-model task, '
        "accuracy otherwise).",
    )


@frozen
class SweepArm:
    """One point of the sweep: label ``sweep.LABEL``, task options merged over the task's,
    ``config`` merged over the shared run config."""

    label: str
    options: dict[str, Any] = attrs.field(factory=dict)
    tasks: tuple[str, ...] = ()  # task labels; empty: every task
    config: dict[str, Any] = attrs.field(factory=dict)

    def applies_to(self, task: str) -> bool:
        return not self.tasks or task in self.tasks


def resolve_sweep(
    sweep: SweepFile, baselines: Sequence[str], tasks: Sequence[str], base: RunConfig
) -> tuple[tuple[SweepArm, ...], list[str]]:
    """The sweep's arms, or what is wrong with them: sizes without the baseline (or the
    baseline without sizes), labels missing, repeated or not a directory name, tasks that
    are not the experiment's, a config that is not a valid run config."""
    sizes = sweep.sizes
    wanted = SIZE_SWEEP in baselines
    if wanted and not sizes:
        return (), [
            'baselines: "size-sweep" needs sizes: add [[sweep.sizes]] tables '
            "(label = ..., options = { TASK_OPTION = ... })"
        ]
    if sizes and not wanted:
        return (), ['sweep.sizes is given but baselines lacks "size-sweep": add it']
    problems = []
    arms: list[SweepArm] = []
    for i, size in enumerate(sizes):
        if not size.label:
            problems.append(
                f"sweep.sizes.{i}.label: expected a label (it names the size: sweep.LABEL)"
            )
        elif problem := label_problem(size.label):
            # A list's items are not checked field by field: the label is checked here.
            problems.append(f"sweep.sizes.{i}.label: {problem}")
        problems += config_problems(size.config, base, f"sweep.sizes.{i}.config")
        unknown = [t for t in size.tasks if t not in tasks]
        if unknown:
            problems.append(
                f"sweep.sizes.{i}.tasks: {', '.join(map(repr, unknown))} is not a task label "
                f"of the experiment: {', '.join(tasks)}"
            )
        arms.append(
            SweepArm(
                SWEEP_PREFIX + size.label, dict(size.options), tuple(size.tasks), dict(size.config)
            )
        )
    labels = [a.label for a in arms]
    problems += [
        f"two sweep sizes have the label {lab!r}"
        for lab in sorted({x for x in labels if labels.count(x) > 1})
    ]
    return tuple(arms), problems


def config_problems(config: dict[str, Any], base: RunConfig, where: str) -> list[str]:
    """An arm's partial config (a sweep point's or a policy's), checked as the run config
    its cells will have (merged over the shared one), so a typo fails before any cell runs."""
    if not config:
        return []
    owned = [k for k in CELL_RUN_KEYS if k in (config.get("run") or {})]
    if owned:
        return [
            f"{where}.run: {', '.join(owned)} is set by each cell of the experiment, not by one arm"
        ]
    data = config_to_dict(base)
    data.pop("schema_version", None)
    try:
        structure(merge(data, config, where), RunConfig, path=where)
    except ConfigError as exc:
        return list(exc.problems)
    return []
