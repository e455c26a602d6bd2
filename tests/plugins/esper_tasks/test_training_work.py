"""Each task's ``training_work()``, which prices a run before anything is built, against
what a run measures: the FLOPs torch's counter gives the built host on a real batch
(the count a run summary's train_flops is made of), and the split sizes of the loaded data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from esper_tasks.charlm import PRESETS as CHARLM_PRESETS
from esper_tasks.charlm import CharLMOptions, CharLMTask
from esper_tasks.cifar10 import PRESETS as CIFAR_PRESETS
from esper_tasks.cifar10 import Cifar10Options, Cifar10Task
from esper_tasks.digits import DIGITS, DigitsOptions, DigitsTask
from esper_tasks.digits import PRESETS as DIGITS_PRESETS
from esper_tasks.glyphs import PRESETS as GLYPHS_PRESETS
from esper_tasks.glyphs import GlyphsOptions, GlyphsTask

from esper_core.env.cost import count_train_flops


def _counted(task: Any, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    return count_train_flops(task.build_host(), task.loss, inputs, targets) / inputs.shape[0]


CNN_TASKS = [
    *[(DigitsTask, DigitsOptions(preset=p), 8) for p in DIGITS_PRESETS],
    *[(GlyphsTask, GlyphsOptions(preset=p), 16) for p in GLYPHS_PRESETS],
    *[(Cifar10Task, Cifar10Options(preset=p), 32) for p in CIFAR_PRESETS],
    # Every shape a preset does not cover: more convs a block, convs after the pool,
    # another image size.
    (GlyphsTask, GlyphsOptions(convs_per_block=2, convs_after_pool=1, image_size=24), 24),
    (DigitsTask, DigitsOptions(preset="small", n_blocks=2, base_channels=5), 8),
]


@pytest.mark.parametrize(("cls", "options", "side"), CNN_TASKS)
def test_a_cnn_hosts_flops_are_what_the_counter_measures(cls: Any, options: Any, side: int) -> None:
    task = cls(options)
    inputs = torch.randn(3, cls.in_channels, side, side)
    targets = torch.randint(0, cls.num_classes, (3,))
    assert task.training_work().flops_per_sample == _counted(task, inputs, targets)


@pytest.mark.parametrize("preset", [*CHARLM_PRESETS, "wide"])
def test_a_transformer_hosts_flops_are_what_the_counter_measures(
    preset: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    chosen = {"preset": "small", "d_model": 96} if preset == "wide" else {"preset": preset}
    task = CharLMTask(CharLMOptions(path=str(corpus), block_size=32, **chosen))
    inputs = torch.randint(0, task.num_classes, (2, 32))
    targets = torch.randint(0, task.num_classes, (2, 32))
    assert task.training_work().flops_per_sample == _counted(task, inputs, targets)


def test_the_split_sizes_are_those_of_the_loaded_data(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("abcdefghij" * 500)
    tasks = [
        DigitsTask(DigitsOptions(val_fraction=0.3)),
        GlyphsTask(GlyphsOptions(n_train=40, n_val=30, n_test=20)),
        CharLMTask(CharLMOptions(path=str(corpus), block_size=16)),
    ]
    for task in tasks:
        work = task.training_work()
        data = task.load_data("cpu")
        sizes = tuple(len(split.targets) for split in (data.train, data.val, data.test))
        assert (work.train_samples, work.eval_samples, work.test_samples) == sizes, task.name


def test_the_digits_count_is_scikit_learns() -> None:
    from sklearn.datasets import load_digits

    assert len(load_digits().target) == DIGITS
