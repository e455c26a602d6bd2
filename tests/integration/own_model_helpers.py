"""Small user models and loops for the library API tests (resnet18 on 3x32x32 batches of 4,
a user-written transformer encoder, a tabular MLP), written as a user would write them."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from tests.plugin_set import first_party

RESNET_SLOTS = ["layer1", "layer2", "layer3"]
TRANSFORMER_SLOTS = ["encoder.layers.0", "encoder.layers.1"]


def resnet(seed: int = 0) -> nn.Module:
    import torchvision

    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=10)


class TokenClassifier(nn.Module):
    """A user's own transformer: embedding, ``nn.TransformerEncoder``, mean pool, head."""

    def __init__(self, vocab: int = 32, d_model: int = 32, classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(self.embed(tokens)).mean(dim=1))
        return out


def transformer(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return TokenClassifier()


class TabularMLP(nn.Module):
    """A user's own MLP for tabular data: two hidden layers of ``hidden`` features."""

    def __init__(self, features: int = 8, hidden: int = 32, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out


MLP_SLOTS = ["body.1", "body.3"]  # the hidden activations, [batch, hidden]


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return TabularMLP()


def tabular_batches(n: int, seed: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(size, 8, generator=g), torch.randint(0, 3, (size,), generator=g))
        for _ in range(n)
    ]


def image_batches(n: int, seed: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(size, 3, 32, 32, generator=g), torch.randint(0, 10, (size,), generator=g))
        for _ in range(n)
    ]


def token_batches(n: int, seed: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(0, 32, (size, 12), generator=g), torch.randint(0, 5, (size,), generator=g))
        for _ in range(n)
    ]


def train_one_epoch(model: nn.Module, opt: torch.optim.Optimizer, batches: Sequence[Any]) -> None:
    """The user's loop, which knows nothing of Esper."""
    model.train()
    for inputs, targets in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(model(inputs), targets).backward()
        opt.step()


def grower_kwargs(**extra: Any) -> dict[str, Any]:
    """What every test passes: the repository's plugins (autoloading is off in tests)."""
    return {"plugins": first_party(), **extra}


def bare_copy(model: nn.Module) -> nn.Module:
    """The model as it is, before any hook is installed on it."""
    return copy.deepcopy(model)


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]
