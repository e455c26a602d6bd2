"""What the tasks share: classification loss/metrics, stratified splits and the task
classes built on them (host presets: presets.py).

Nothing here imports torch or numpy at module level: plugin discovery imports this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from esper_core import BatchMetrics, TaskContext, TaskData, TrainingWork
from esper_core.components.task import SlotSite
from esper_core.converter import check_values
from esper_core.errors import ConfigError
from esper_tasks.presets import CNN_HOST_FIELDS, CNNPreset, resolve_preset

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


def validate_options(options: Any, task_name: str) -> None:
    """Run the options' declared checks, so a directly built ``Options`` is checked too."""
    problems = check_values(options, f"tasks.{task_name}")
    if problems:
        raise ConfigError(problems)


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor, reduction: str) -> torch.Tensor:
    """Cross-entropy over the last dimension, for ``[B, K]`` and ``[B, T, K]`` outputs alike."""
    import torch.nn.functional as F

    return F.cross_entropy(
        outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1), reduction=reduction
    )


def classification_metrics(outputs: torch.Tensor, targets: torch.Tensor) -> BatchMetrics:
    """Sums over every prediction of the batch, all on device (no ``.item()``, no sync)."""
    import torch

    outputs = outputs.detach()
    loss_sum = cross_entropy(outputs, targets, "sum")
    correct = (outputs.argmax(dim=-1) == targets).sum()
    # torch.full launches a fill kernel; torch.tensor(n, device=...) would copy from the host.
    count = torch.full((), targets.numel(), dtype=torch.int64, device=targets.device)
    return BatchMetrics(loss_sum=loss_sum, correct=correct, count=count)


def _apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Split ``total`` proportionally to integer ``weights`` (largest remainder, exact)."""
    import numpy as np

    if total == 0:
        return np.zeros_like(weights)
    scaled = total * weights
    base, remainder = np.divmod(scaled, weights.sum())
    short = int(total - base.sum())
    order = np.argsort(-remainder, kind="stable")
    base[order[:short]] += 1
    return base


def stratified_split(labels: Any, sizes: Sequence[int], seed: int) -> list[np.ndarray]:
    """Disjoint index sets of the given sizes, each with the label proportions of the whole.

    Deterministic in ``seed`` alone (numpy PCG64), independent of any run seed. Each
    returned index array is sorted, so a split keeps the dataset's order.
    """
    import numpy as np

    labels = np.asarray(labels)
    if sum(sizes) != len(labels):
        raise ValueError(f"split sizes {list(sizes)} do not add up to {len(labels)} samples")
    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    remaining = np.array([len(p) for p in pools], dtype=np.int64)
    taken = np.zeros_like(remaining)
    parts = []
    for j, size in enumerate(sizes):
        last = j == len(sizes) - 1
        counts = remaining.copy() if last else _apportion(size, remaining)
        chosen = [pool[t : t + k] for pool, t, k in zip(pools, taken, counts, strict=True)]
        parts.append(np.sort(np.concatenate(chosen)))
        taken += counts
        remaining -= counts
    return parts


class CrossEntropyTask:
    """What the tasks share: options checked at construction, the chance-level loss,
    cross-entropy loss and metrics over the last dimension, and data loaded once on the
    CPU and copied once per device (a subclass provides ``_load_cpu`` and ``_cache``)."""

    name: ClassVar[str]
    num_classes: int
    options: Any
    context: TaskContext
    _cache: dict[str, TaskData]
    _load_cpu: Callable[[], TaskData]  # each task reads its own dataset

    def __attrs_post_init__(self) -> None:
        validate_options(self.options, self.name)

    @property
    def chance_loss(self) -> float:
        """ln(num_classes): the loss of a uniform guess, the governor's reference."""
        import math

        return math.log(self.num_classes)

    def load_data(self, device: torch.device | str) -> TaskData:
        from esper_core.env.device_data import cached_on_device

        return cached_on_device(self._cache, device, self._load_cpu)

    def prepare_batch(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        train: bool,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Batches as the split holds them; a task that converts or augments overrides it."""
        return inputs, targets

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over every prediction (``[B, K]`` or ``[B, T, K]`` outputs)."""
        return cross_entropy(outputs, targets, "mean")

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> BatchMetrics:
        """Sums over predictions: loss_sum / count is the mean loss (its exp the perplexity)."""
        return classification_metrics(outputs, targets)


class CNNPresetTask(CrossEntropyTask):
    """A classification task whose host is a :class:`~esper_tasks.hosts.cnn.CNNHost` of a
    named preset (``presets``), with the options' ``CNN_HOST_FIELDS`` overrides."""

    presets: ClassVar[dict[str, CNNPreset]]
    in_channels: ClassVar[int]
    image_side: int  # pixels of the square images the host sees
    # Training, validation and test images, from the options alone (each task's own).
    split_sizes: Callable[[], tuple[int, int, int]]

    def training_work(self) -> TrainingWork:
        """What an epoch of the bare host computes, without loading the data or building it."""
        from esper_tasks.host_flops import cnn_train_flops

        flops = cnn_train_flops(self.in_channels, self.num_classes, self.preset, self.image_side)
        return TrainingWork(*self.split_sizes(), flops_per_sample=flops)

    def slot_sites(self) -> tuple[SlotSite, ...]:
        """The bare host's slots and the pixels each sits on (growth's price in the estimate)."""
        from esper_tasks.host_flops import cnn_slot_sites

        return cnn_slot_sites(self.preset, self.image_side)

    def grown_flops_per_sample(self, width: float, depth: int) -> float:
        """One sample's training FLOPs once every stage grew ``width`` x wide, ``depth`` x deep."""
        from esper_tasks.host_flops import cnn_train_flops, grown_cnn

        grown = grown_cnn(self.preset, width, depth)
        return cnn_train_flops(self.in_channels, self.num_classes, grown, self.image_side)

    @property
    def preset(self) -> CNNPreset:
        preset: CNNPreset = resolve_preset(self.presets, self.options, CNN_HOST_FIELDS)
        return preset

    def build_host(self) -> nn.Module:
        from esper_tasks.hosts.cnn import CNNHost

        p = self.preset
        return CNNHost(
            self.in_channels,
            self.num_classes,
            p.base_channels,
            p.n_blocks,
            p.convs_per_block,
            p.convs_after_pool,
            p.slots_before_pool,
        )
