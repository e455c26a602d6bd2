"""Depth growth of a CNN stage whose conv layers down-sample (esper_core.lifecycle.
deepening_cnn): a new layer goes before the pool at the stage's final resolution, so only
a layer that keeps its input's shape may be copied (``stack``), and the stage computes the
same bits at birth and keeps its output's shape."""

from __future__ import annotations

import math

import pytest
import torch
from esper_operators.deepening_cnn import ConvDeepening, GatedLayer
from torch import nn

from esper_core.lifecycle.host_growth import GrowthError

X = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))


class StridedCNN(nn.Module):
    """One stage: a stem conv, a stride-2 ``C -> C`` conv (shape-changing, though its
    channels stay), and, when ``keeper``, a stride-1 ``C -> C`` conv; then a pool."""

    def __init__(self, keeper: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers: list[nn.Module] = [nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
        layers += [nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
        if keeper:
            layers += [nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()]
        self.blocks = nn.ModuleList([nn.Sequential(*layers, nn.MaxPool2d(2))])

    def depth_stages(self) -> nn.ModuleList:
        return self.blocks

    def stage_channels(self) -> tuple[int, ...]:
        return (4,)

    def new_layer(self, channels: int, generator: torch.Generator) -> nn.Sequential:
        conv = nn.Conv2d(channels, channels, 3, padding=1)
        with torch.no_grad():
            nn.init.kaiming_uniform_(conv.weight, a=math.sqrt(5), generator=generator)
        return nn.Sequential(conv, nn.BatchNorm2d(channels), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.blocks[0](x)
        return out


def _deepened(mode: str) -> tuple[StridedCNN, ConvDeepening, torch.Tensor]:
    host = StridedCNN().eval()
    before = host(X)
    deepening = ConvDeepening(host, mode, 2, (), torch.Generator().manual_seed(7))
    deepening.install()
    return host, deepening, before


@pytest.mark.parametrize("mode", ["stack", "identity"])
def test_a_strided_stage_deepens_bit_identically_at_birth(mode: str) -> None:
    host, deepening, before = _deepened(mode)
    assert before.shape == (4, 4, 4, 4)  # 16 -> 8 (stride 2) -> 4 (pool)
    assert torch.equal(host(X), before)
    gated = [m for m in host.blocks[0] if isinstance(m, GatedLayer)]
    # stack copies the one layer that keeps its shape; identity adds one per layer.
    assert len(gated) == (1 if mode == "stack" else 3)
    for g in gated:
        conv = g.layer[0]
        assert isinstance(conv, nn.Conv2d) and conv.stride == (1, 1)
    deepening.set_mask(1.0)
    grown = host(X)
    assert grown.shape == before.shape and not torch.equal(grown, before)
    deepening.fold()
    assert not any(isinstance(m, GatedLayer) for m in host.modules())
    assert torch.equal(host(X), grown)  # lerp at 1 is exact: the fold changes no bit


def test_stack_refuses_a_stage_whose_only_channel_preserving_conv_is_strided() -> None:
    """The stride-2 ``C -> C`` conv keeps its channels but halves the resolution: a copy
    of it after the stage's last layer would not fit there."""
    with pytest.raises(GrowthError, match="no channel-preserving layer to stack"):
        ConvDeepening(StridedCNN(keeper=False), "stack", 2, (), None)
