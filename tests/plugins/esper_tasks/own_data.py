"""A user's own data and model for tasks.dataset, named by dotted paths in the tests."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def splits() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """Fixed train / validation / test splits: class patterns plus noise."""
    g = torch.Generator().manual_seed(0)
    patterns = torch.randn(4, 3, 8, 8, generator=g)

    def split(n: int) -> TensorDataset:
        y = torch.randint(0, 4, (n,), generator=g)
        return TensorDataset(patterns[y] + 0.5 * torch.randn(n, 3, 8, 8, generator=g), y)

    return split(64), split(32), split(32)


class Pairs(Dataset[Any]):
    """Not tensors in memory: served item by item through a DataLoader."""

    def __init__(self, data: TensorDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data[i]
        return x, y


def item_splits() -> tuple[Pairs, Pairs, Pairs]:
    a, b, c = splits()
    return Pairs(a), Pairs(b), Pairs(c)


def two_splits() -> tuple[TensorDataset, TensorDataset]:
    a, b, _ = splits()
    return a, b


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 4),
    )


def strings() -> tuple[list[tuple[str, int]], ...]:
    """Items whose inputs are text: a wrong type for a model."""
    items = [("an image", 0), ("another", 1)]
    return items, items, items


def float_targets() -> tuple[TensorDataset, ...]:
    a, b, c = splits()
    return tuple(TensorDataset(d.tensors[0], d.tensors[1].float() + 0.5) for d in (a, b, c))  # type: ignore[return-value]


def mixed_shapes() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    a, b, c = splits()
    return a, TensorDataset(b.tensors[0][:, :, :6, :6], b.tensors[1]), c


def scalar_cnn() -> nn.Module:
    """One number per example (a regression head): no class dimension."""
    return nn.Sequential(*small_cnn(), nn.Flatten(0))


def _relabelled(split: TensorDataset, old: int, new: int) -> TensorDataset:
    y = split.tensors[1].clone()
    y[y == old] = new
    return TensorDataset(split.tensors[0], y)


def label_past_the_outputs() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """Labels numbered 1..4 in validation (a 1-based export) for a model of 4 outputs."""
    a, b, c = splits()
    return a, TensorDataset(b.tensors[0], b.tensors[1] + 1), c


def negative_label() -> tuple[Pairs, Pairs, Pairs]:
    """Served item by item, one test label -1 (a placeholder for "unknown")."""
    a, b, c = splits()
    return Pairs(a), Pairs(b), Pairs(_relabelled(c, 2, -1))


def label_missing_from_train() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """Class 3 never in training, present in validation and test."""
    a, b, c = splits()
    keep = a.tensors[1] != 3
    return TensorDataset(a.tensors[0][keep], a.tensors[1][keep]), b, c


def one_layer() -> nn.Module:
    """A linear model: its one layer writes the output, so no layer pair can widen."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))


def _with_input(split: TensorDataset, index: int, value: float) -> TensorDataset:
    x = split.tensors[0].clone()
    x[index].view(-1)[5] = value
    return TensorDataset(x, split.tensors[1])


def all_nan() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    a, b, c = splits()
    return TensorDataset(torch.full_like(a.tensors[0], float("nan")), a.tensors[1]), b, c


def one_nan() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    a, b, c = splits()
    return _with_input(a, 7, float("nan")), b, c


def one_inf() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    a, b, c = splits()
    return _with_input(a, 3, float("inf")), b, c


def huge_input() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """1e38: finite in float32, but the first layer's sums overflow."""
    a, b, c = splits()
    return _with_input(a, 11, 1e38), b, c


def nan_in_validation() -> tuple[Pairs, Pairs, Pairs]:
    """Served item by item, one NaN in validation only."""
    a, b, c = splits()
    return Pairs(a), Pairs(_with_input(b, 4, float("nan"))), Pairs(c)


def hangs() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """A data function that never returns (a download waiting on a dead server)."""
    import time

    while True:
        time.sleep(0.1)
