"""tasks.digits: fixed stratified splits, data, options, loss and metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from esper_tasks.digits import DigitsOptions, DigitsTask

from esper_core.components.task import BatchMetrics, Task
from esper_core.converter import structure
from esper_core.errors import ConfigError


@pytest.fixture(scope="module")
def task() -> DigitsTask:
    return DigitsTask()


def test_split_sizes_disjoint_and_complete(task: DigitsTask) -> None:
    train, val, test = task.split_indices()
    assert (len(train), len(val), len(test)) == (1079, 359, 359)
    everything = np.concatenate([train, val, test])
    assert len(np.unique(everything)) == 1797


def test_splits_are_stratified(task: DigitsTask) -> None:
    from sklearn.datasets import load_digits

    labels = load_digits().target
    overall = np.bincount(labels, minlength=10) / len(labels)
    for idx in task.split_indices():
        counts = np.bincount(labels[idx], minlength=10)
        # each class within one sample of its exact proportional share
        assert np.all(np.abs(counts - overall * len(idx)) <= 1.0)


def test_split_depends_on_split_seed_only(task: DigitsTask) -> None:
    torch.manual_seed(123)
    np.random.seed(123)
    again = DigitsTask().split_indices()
    for a, b in zip(task.split_indices(), again):
        assert np.array_equal(a, b)
    other = DigitsTask(DigitsOptions(split_seed=1)).split_indices()
    assert not np.array_equal(other[1], again[1])


def test_loaded_tensors(task: DigitsTask) -> None:
    data = task.load_data("cpu")
    assert data.train.inputs.shape == (1079, 1, 8, 8)
    assert data.train.inputs.dtype == torch.float32 and data.train.targets.dtype == torch.int64
    assert float(data.train.inputs.min()) >= 0.0 and float(data.train.inputs.max()) == 1.0
    assert task.load_data(torch.device("cpu")) is data  # cached per device


def test_protocol_and_constants(task: DigitsTask) -> None:
    assert isinstance(task, Task)
    assert task.topology == "cnn" and task.num_classes == 10
    assert task.default_max_epochs == 30 and task.default_batch_size == 64
    assert task.chance_loss == pytest.approx(math.log(10))


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"tasks\.digits\.preset"):
        structure({"preset": "huge"}, DigitsOptions, "tasks.digits")
    with pytest.raises(ConfigError, match="val_fraction"):
        DigitsTask(DigitsOptions(val_fraction=0.5, test_fraction=0.5))
    with pytest.raises(ConfigError, match="n_blocks"):
        DigitsTask(DigitsOptions(n_blocks=4))  # an 8x8 image survives 3 poolings only
    opts = structure({"preset": "small", "base_channels": 4}, DigitsOptions)
    assert DigitsTask(opts).preset.base_channels == 4


@pytest.mark.parametrize(
    ("preset", "channels"), [("base", (32, 64, 128)), ("small", (8, 16, 32)), ("impaired", (32,))]
)
def test_presets_build_hosts(preset: str, channels: tuple[int, ...]) -> None:
    host = DigitsTask(DigitsOptions(preset=preset)).build_host()
    assert tuple(spec.channels for spec in host.injection_specs()) == channels
    assert host(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_loss_and_metrics_are_sums_on_device(task: DigitsTask) -> None:
    outputs = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 3.0], [1.0, 0.0, 0.0]])
    targets = torch.tensor([0, 1, 0])
    metrics = task.metrics(outputs, targets)
    assert isinstance(metrics, BatchMetrics)
    assert all(
        isinstance(v, torch.Tensor) for v in (metrics.loss_sum, metrics.correct, metrics.count)
    )
    assert int(metrics.correct) == 2 and int(metrics.count) == 3
    assert float(metrics.loss_sum) == pytest.approx(3 * float(task.loss(outputs, targets)))
    logits = torch.randn(4, 3, requires_grad=True)
    assert not task.metrics(logits, torch.tensor([0, 1, 2, 0])).loss_sum.requires_grad
