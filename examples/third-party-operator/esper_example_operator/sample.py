"""The small model ``esper operators`` lists the operator on and checks it with (apart
from inner.py, so that loading the plugin does not load torch)."""

from __future__ import annotations

import torch
from torch import nn


class Tabular(nn.Module):
    """An input layer, an MLP block and a head: the block's hidden width is the one layer
    pair inside a submodule (``mlp.0 -> mlp.2``)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.mlp(self.embed(x).relu()).relu())
        return out
