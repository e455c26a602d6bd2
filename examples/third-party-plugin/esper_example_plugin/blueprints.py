"""A seed blueprint from outside Esper: a dilated 3x3 convolution in residual form.

It widens the receptive field of the layer it follows at the cost of 9*C*C + C
parameters, and starts as the identity (its output conv is zero-initialised), so
germinating it does not disturb the host.
"""

from __future__ import annotations

from typing import Any

from esper_core import hookimpl
from esper_core.components.blueprint import Blueprint


def build_dilated(channels: int) -> Any:
    import torch
    from torch import nn

    class DilatedResidual(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=2, dilation=2)
            nn.init.zeros_(self.conv.weight)
            nn.init.zeros_(self.conv.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.conv(torch.relu(x))

    return DilatedResidual(channels)


DILATED = Blueprint(
    name="dilated",
    topology="cnn",
    factory=build_dilated,
    param_estimate=lambda c: 9 * c * c + c,
    description="dilated 3x3 conv residual (zero-init): a wider receptive field",
    identity_at_birth=True,
)


@hookimpl
def esper_register_blueprints(register: Any) -> None:
    register(DILATED)
