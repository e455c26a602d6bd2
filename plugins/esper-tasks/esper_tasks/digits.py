"""``tasks.digits``: the 8x8 handwritten digits that scikit-learn ships (no download).

1797 greyscale images, inputs ``[N, 1, 8, 8]`` in [0, 1], 10 classes. The stratified
train/validation/test split is fixed by ``split_seed`` alone, never by the run seed,
so every run and every policy is measured on the same images.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import attrs
from attrs import define, field

from esper_core import MeasuredCost, TaskContext, TaskData, hookimpl
from esper_core.config_limits import MAX_SEED
from esper_core.converter import in_range, one_of, options_field
from esper_core.recipe import CNN_RECIPE, Recipe
from esper_tasks.common import CNNPresetTask, stratified_split
from esper_tasks.presets import (
    CNNPreset,
    base_channels_option,
    cnn_host_problems,
    convs_after_pool_option,
    convs_per_block_option,
    slots_before_pool_option,
)

if TYPE_CHECKING:
    pass

# ``impaired`` is ``base`` cut after its first block: 3x3 receptive fields averaged over
# the image, so it cannot see a digit's layout (~70-80% test accuracy). Seeds at its slot
# add exactly the depth it lacks, whereas a host made narrow loses information before
# any slot and no width-preserving seed can recover it (measured; see the README).
# Images of scikit-learn's load_digits(), so the cost of a run is known without importing
# scikit-learn (a test checks the count).
DIGITS = 1797

PRESETS: dict[str, CNNPreset] = {
    "base": CNNPreset(base_channels=32, n_blocks=3),
    "small": CNNPreset(base_channels=8, n_blocks=3),
    "impaired": CNNPreset(base_channels=32, n_blocks=1),
}


@define
class DigitsOptions:
    # `impaired` by default: the host on which the default controller's growth pays against
    # no growth (the README's main job); `small` and `base` are what a researcher would pick,
    # and the glyphs task's size sweep is where growth is compared with them.
    preset: str = options_field(
        "impaired", one_of(*PRESETS), "Host preset: impaired, small or base."
    )
    base_channels: int | None = base_channels_option()
    n_blocks: int | None = options_field(
        None,
        in_range(1, 3, integer=True),
        "Override the preset: blocks (= slots), at most 3 for 8x8.",
    )
    convs_per_block: int | None = convs_per_block_option()
    convs_after_pool: int | None = convs_after_pool_option()
    slots_before_pool: bool | None = slots_before_pool_option()
    split_seed: int = options_field(
        0,
        in_range(0, MAX_SEED, integer=True),
        "Seed of the fixed stratified split (not the run seed).",
    )
    val_fraction: float = options_field(
        0.2, in_range(0, 1, lo_open=True, hi_open=True), "Fraction of images for validation."
    )
    test_fraction: float = options_field(
        0.2, in_range(0, 1, lo_open=True, hi_open=True), "Fraction of images for test."
    )

    def __esper_validate__(self) -> list[str]:
        if self.val_fraction + self.test_fraction >= 1:
            return [
                f"val_fraction + test_fraction must leave training data, got "
                f"{self.val_fraction} + {self.test_fraction}"
            ]
        return cnn_host_problems(PRESETS, self, DigitsTask.in_channels)


@define
class DigitsTask(CNNPresetTask):
    """Classify scikit-learn's 8x8 digits with a CNN host."""

    name: ClassVar[str] = "digits"
    description: ClassVar[str] = "8x8 handwritten digits (scikit-learn, no download), CNN host"
    Options: ClassVar[type] = DigitsOptions

    topology: ClassVar[str] = "cnn"
    in_channels: ClassVar[int] = 1
    presets: ClassVar[dict[str, CNNPreset]] = PRESETS
    image_side: ClassVar[int] = 8
    num_classes: ClassVar[int] = 10
    default_max_epochs: ClassVar[int] = 30
    default_batch_size: ClassVar[int] = 64
    default_eval_batch_size: ClassVar[int] = 512
    # Seconds of one CPU thread a run takes, for the estimate of `esper compare --dry-run`:
    # measured by benchmarks/task_cost.py (BENCHMARKS.md, "What a run costs, per sample
    # and per GFLOP").
    measured_cost: ClassVar[MeasuredCost] = MeasuredCost(
        seconds_per_run=0.23, seconds_per_sample=6.2e-05, seconds_per_gflop=0.046
    )
    # The CNN recipe at the rate the tuning rule chooses for not growing (wait) on the
    # default host, tuning random seeds 100-104 (docs/results/main-job-fair-rate.md), so
    # `esper run` against `esper run --policy wait` is a fair A/B. It was 0.02, the rate
    # the old capacity trigger needed to grow at all (wait under-trains there).
    default_recipe: ClassVar[Recipe] = attrs.evolve(CNN_RECIPE, lr=0.2)

    options: DigitsOptions = field(factory=DigitsOptions)
    context: TaskContext = field(factory=TaskContext)
    _cache: dict[str, TaskData] = field(factory=dict, init=False, repr=False)

    def split_sizes(self, n: int = DIGITS) -> tuple[int, int, int]:
        """Training, validation and test images of ``n``."""
        n_val = round(n * self.options.val_fraction)
        n_test = round(n * self.options.test_fraction)
        return n - n_val - n_test, n_val, n_test

    def split_indices(self) -> list[Any]:
        """Train, validation and test indices into ``load_digits()`` (numpy arrays)."""
        from sklearn.datasets import load_digits

        labels = load_digits().target
        return stratified_split(labels, self.split_sizes(len(labels)), self.options.split_seed)

    def _load_cpu(self) -> TaskData:
        import torch
        from sklearn.datasets import load_digits

        from esper_core.env.data import TensorSplit

        digits = load_digits()
        images = torch.as_tensor(digits.images, dtype=torch.float32).div_(16.0).unsqueeze(1)
        labels = torch.as_tensor(digits.target, dtype=torch.int64)
        splits = []
        for idx in self.split_indices():
            index = torch.as_tensor(idx, dtype=torch.int64)
            splits.append(TensorSplit(images[index].contiguous(), labels[index].contiguous()))
        return TaskData(train=splits[0], val=splits[1], test=splits[2])


@hookimpl
def esper_register_tasks(register: Any) -> None:
    register(DigitsTask)
