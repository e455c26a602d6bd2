"""The task protocol: a dataset with fixed splits, a host family and a loss/metric.

A task component is a class with ``name``, ``description`` and an attrs ``Options``
class, constructed as ``TaskClass(options, context)`` with a :class:`TaskContext` and
registered through ``esper_register_tasks``. Data for datasets that fit in memory is
returned as :class:`esper_core.env.data.TensorSplit` values (the fast path: indexed batches
on the env's device); larger datasets may return any ``torch.utils.data.Dataset``.

A language model may say so with an optional class attribute ``language_model = True``
(absent means a classifier): its run summary then shows the perplexity, and the
``size-sweep`` frontier of ``esper compare`` is measured in test loss, not accuracy.

A task may name its training recipe with an optional class attribute ``default_recipe``
(an :class:`esper_core.recipe.Recipe`); without one it is trained with its topology's
family recipe (:func:`esper_core.recipe.family_recipe`). Every ``[training]`` key a run
sets overrides it.

A task may say what a run of it costs before anything is built, for the estimate of
``esper compare --dry-run``: an optional method ``training_work()`` returning a
:class:`TrainingWork` (from its options alone: no data loaded, no model built, no torch
imported), and an optional class attribute ``measured_cost``, a :class:`MeasuredCost`
measured by ``benchmarks/task_cost.py``. Without them the estimate of a fresh experiment
says the task was not estimated. Two more optional methods let it price growth the same
way: ``slot_sites()``, each slot's :class:`SlotSite`, and
``grown_flops_per_sample(width, depth)``, the training FLOPs of one sample of the host
grown ``width`` times as wide and ``depth`` times as deep; without them a growing arm is
priced as its bare host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from attrs import frozen

if TYPE_CHECKING:
    import torch
    from torch import nn

    from esper_core.components.host import InjectionSpec
    from esper_core.env.data import Split


@frozen
class TaskContext:
    """What a task may know about the run that builds it."""

    seed: int = 0  # run.seed: a task that generates its data derives its randomness from it
    quiet: bool = False  # the run shows no progress output (e.g. while a dataset downloads)


@frozen
class TaskData:
    """The three fixed splits: rewards and gates use ``val``; reported results use ``test``."""

    train: Split
    val: Split
    test: Split


@frozen
class TrainingWork:
    """What one epoch of a task's bare host computes, known from its options alone."""

    train_samples: int  # a full pass over the training split (before env.max_batches)
    eval_samples: int  # the validation split, evaluated after every epoch
    test_samples: int
    # Training FLOPs (forward + backward) of one sample, as torch's FlopCounterMode counts
    # them for the run summary's train_flops (a test holds each task to that count).
    flops_per_sample: float


@frozen
class SlotSite:
    """A slot of the bare host, known from the task's options: its spec, and the positions
    of its activation per sample (a CNN's height x width, a transformer's tokens, 1 for an
    MLP), which every weight of a seed grown there is applied at."""

    spec: InjectionSpec
    positions: int


@frozen
class MeasuredCost:
    """Seconds of one CPU thread a task's runs take, measured by ``benchmarks/task_cost.py``
    on two host sizes (BENCHMARKS.md): a part per run (making the data, building the
    host), a part per sample passed through the model (training and evaluation alike:
    batching, the optimizer's step, bookkeeping) and a part per GFLOP computed. Small
    hosts are dominated by the first two, large ones by the last."""

    seconds_per_run: float
    seconds_per_sample: float
    seconds_per_gflop: float


@frozen
class BatchMetrics:
    """Sums over one batch, kept on device: ``loss_sum / count`` is the mean loss."""

    loss_sum: torch.Tensor
    correct: torch.Tensor
    count: torch.Tensor


@runtime_checkable
class Task(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    options: Any
    topology: str  # "cnn" or "transformer": selects the blueprints a policy may choose
    num_classes: int  # classes, or vocabulary size for language models
    default_max_epochs: int
    default_batch_size: int
    default_eval_batch_size: int

    @property
    def chance_loss(self) -> float:
        """Cross-entropy of a uniform guess, ln(num_classes): the governor's reference."""
        ...

    def build_host(self) -> nn.Module:
        """A fresh host (implements ``esper_core.lifecycle.model.HostProtocol``); the caller seeds it."""
        ...

    def load_data(self, device: torch.device) -> TaskData:
        """The splits, with tensors on ``device`` where the dataset fits in memory."""
        ...

    def prepare_batch(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        train: bool,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-batch transform on device (dtype conversion, batched augmentation)."""
        ...

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean training loss of a batch."""
        ...

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> BatchMetrics:
        """Loss sum, correct predictions and count of a batch, without a host sync."""
        ...
