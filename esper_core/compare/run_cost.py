"""What a run of a cell will cost, before anything is built: the estimate of a fresh
``esper compare --dry-run``.

A task that says what its bare host computes per epoch (``training_work()``, from its
options alone) gives each cell a :class:`RunWork`: the samples passed through the model and
the GFLOPs computed over the run, with the cell's own epochs, batch size and
``env.max_batches``. Its ``measured_cost`` (seconds per sample and per GFLOP, measured by
``benchmarks/task_cost.py``) turns that into seconds. Once runs of the task have finished,
their measured times calibrate the same prediction on this machine, so a host size not yet
run is scaled by its own FLOPs instead of being given its smaller siblings' time. A
growing arm adds the FLOPs of what it grows (:mod:`esper_core.compare.growth_work`):
known in advance for a fixed schedule, assumed (and the assumption shown) for a policy
that decides as it goes.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field, frozen

from esper_core.compare.growth_work import Growth, growth
from esper_core.components.task import MeasuredCost, TrainingWork
from esper_core.config import RunConfig
from esper_core.converter import structure
from esper_core.errors import EsperError
from esper_core.plugins import PluginManager
from esper_core.run.resolve import task_context

# Evaluation runs the forward pass alone: a third of a training step's FLOPs (the
# backward pass computes the gradients of the inputs and of the weights, each about as
# costly as the forward).
FORWARD_SHARE = 1 / 3


@frozen
class RunWork:
    """What one run computes: samples through the model and GFLOPs, training and evaluation."""

    samples: float
    gflop: float

    def seconds(self, cost: MeasuredCost) -> float:
        return (
            cost.seconds_per_run
            + self.samples * cost.seconds_per_sample
            + self.gflop * cost.seconds_per_gflop
        )


@frozen
class TaskCost:
    """A cell's work and its task's measured cost (None: the task ships none)."""

    work: RunWork
    cost: MeasuredCost | None
    assumption: str | None = None  # what was assumed of an adaptive policy's growth


def epochs_of(config: RunConfig, task: Any) -> int:
    return config.env.max_epochs or task.default_max_epochs


def run_work(
    config: RunConfig, task: Any, work: TrainingWork, grown: Growth | None = None
) -> RunWork:
    """The work of one run of ``config`` on ``task`` (its defaults where the config has
    none), with what ``grown`` adds from its epoch on."""
    epochs = epochs_of(config, task)
    batch = config.env.batch_size or task.default_batch_size
    trained = work.train_samples
    if config.env.max_batches is not None:
        trained = min(trained, config.env.max_batches * batch)
    every = config.env.eval_test_every
    tests = (epochs // every if every else 0) + 1  # and once at the end
    evaluated = epochs * work.eval_samples + tests * work.test_samples
    samples = epochs * trained + evaluated
    flops = (epochs * trained + FORWARD_SHARE * evaluated) * work.flops_per_sample
    for extra, start in grown.parts if grown is not None else ():
        # The grown epochs' training and validation passes, and every test pass: the
        # final one sees the grown model, and an upper estimate may count them all.
        later = max(0, epochs - start)
        passes = later * trained + FORWARD_SHARE * (
            later * work.eval_samples + tests * work.test_samples
        )
        flops += passes * extra
    return RunWork(samples, flops / 1e9)


@define
class CellCosts:
    """Each cell's :class:`TaskCost`, its task built once per set of options (charlm reads
    its corpus to know its vocabulary)."""

    pm: PluginManager
    _works: dict[tuple[str, str], tuple[Any, TrainingWork] | None] = field(factory=dict)

    def __call__(self, config: RunConfig, from_start: bool = False) -> TaskCost | None:
        """The cost of a cell whose config is resolved, with its policy's growth (from
        epoch 0 for ``from_start``: a static-final twin); None where its task cannot say it."""
        name = config.run.task
        cls = self.pm.registry("tasks").get(name)
        if not hasattr(cls, "training_work"):
            return None
        options = config.component_options("tasks", name)
        key = (name, repr(options))
        if key not in self._works:
            self._works[key] = self._work(cls, structure(options, cls.Options), config)
        known = self._works[key]
        if known is None:
            return None
        task, work = known
        grown = growth(config, task, epochs_of(config, task), self.pm, from_start)
        return TaskCost(
            run_work(config, task, work, grown),
            getattr(cls, "measured_cost", None),
            grown.assumption if grown is not None else None,
        )

    @staticmethod
    def _work(cls: Any, options: Any, config: RunConfig) -> tuple[Any, TrainingWork] | None:
        try:
            task = cls(options, task_context(config, quiet=True))
            return task, task.training_work()
        except EsperError:  # missing data: the run's own check says so, with how to fix it
            return None
