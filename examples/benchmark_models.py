"""A user's own models for the controller benchmark (examples/suites/controller-suite.toml).

Each is reached through ``tasks.dataset`` (``data = "examples.benchmark_models:..."``,
``model = "examples.benchmark_models:..."``), as a user's model would be: plain
``nn.Module`` factories and ``(train, validation, test)`` dataset functions, offline and
small enough for a benchmark episode of a few CPU seconds.

- tabular: a generated classification problem (scikit-learn's ``make_classification``,
  the problem of examples/own_model_mlp.py), for MLPs of several widths;
- images: scikit-learn's 8x8 digits as ``[1, 8, 8]`` tensors, for small CNNs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

FEATURES, CLASSES = 20, 5
DIGIT_CLASSES = 10


def _split(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[TensorDataset, ...]:
    # A fixed split by position after one fixed shuffle: the run seed never moves it.
    order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(0))
    inputs, targets = inputs[order], targets[order]
    n = len(targets)
    bounds = [(0, int(0.6 * n)), (int(0.6 * n), int(0.8 * n)), (int(0.8 * n), n)]
    return tuple(TensorDataset(inputs[a:b], targets[a:b]) for a, b in bounds)


def tabular() -> tuple[TensorDataset, ...]:
    """Train / validation / test of one generated problem, standardised on train."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=3000,
        n_features=FEATURES,
        n_informative=12,
        n_redundant=4,
        n_classes=CLASSES,
        n_clusters_per_class=3,
        class_sep=1.2,
        random_state=0,
    )
    inputs = torch.tensor(x, dtype=torch.float32)
    inputs = (inputs - inputs[:1800].mean(dim=0)) / inputs[:1800].std(dim=0)
    return _split(inputs, torch.tensor(y, dtype=torch.long))


def digit_images() -> tuple[TensorDataset, ...]:
    """scikit-learn's 8x8 digits, scaled to [0, 1], as one-channel images."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    inputs = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return _split(inputs, torch.tensor(digits.target, dtype=torch.long))


class MLP(nn.Module):
    """Two hidden layers and a head; slots on ``body.1`` and ``body.3`` (the ReLUs)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out


class CNN(nn.Module):
    """Two conv layers, a global pool and a head; slots on ``features.2`` and
    ``features.5`` (the ReLUs)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        c = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, padding=1),
            nn.BatchNorm2d(2 * c),
            nn.ReLU(),
        )
        self.head = nn.Linear(2 * c, DIGIT_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return out


def mlp_wide() -> nn.Module:
    """Well sized for the tabular problem: growth has little left to buy."""
    return MLP(64)


def mlp_broad() -> nn.Module:
    """Twice the well-sized width: a training host where growth has nothing to buy."""
    return MLP(128)


def mlp_ample() -> nn.Module:
    """48 wide: a training host between the evaluation's medium MLP (growth pays a little)
    and its wide one (growth does not pay)."""
    return MLP(48)


def mlp_narrow() -> nn.Module:
    return MLP(8)


def mlp_medium() -> nn.Module:
    """Between the two: growth has a little to buy."""
    return MLP(24)


def mlp_small() -> nn.Module:
    """16 wide: an evaluation host between the narrow training MLP and the medium one."""
    return MLP(16)


def mlp_slim() -> nn.Module:
    """12 wide: a training host between the narrow training MLP and the evaluation's
    small one."""
    return MLP(12)


def mlp_roomy() -> nn.Module:
    """32 wide: a training host between the evaluation's medium MLP and the ample training
    one."""
    return MLP(32)


def cnn_small() -> nn.Module:
    return CNN(8)


def cnn_wide() -> nn.Module:
    return CNN(16)


def cnn_ample() -> nn.Module:
    """12 channels: a training host between the evaluation's small CNN and the wide
    training one."""
    return CNN(12)


def cnn_tiny() -> nn.Module:
    return CNN(4)


def cnn_narrow() -> nn.Module:
    """6 channels: an evaluation host between the tiny training CNN and the small one."""
    return CNN(6)


def cnn_slim() -> nn.Module:
    """5 channels: a training host between the tiny training CNN and the evaluation's
    narrow one."""
    return CNN(5)
