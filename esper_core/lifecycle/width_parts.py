"""What every width operator's masked modules share: the modules without parameters a
widened layer passes its new channels through, the cross inits a request may ask for,
the check of a masked module's new inputs and outputs, and the init of new weights."""

from __future__ import annotations

import math

import torch
from torch import nn

from esper_core.lifecycle.host_growth import WidthError

# Modules without parameters that act on each channel alone: widening passes them both the
# old and the new channels unchanged. Anything else inside a stage is refused.
CHANNELWISE = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Identity,
    nn.Dropout,
    nn.MaxPool2d,
    nn.AvgPool2d,
)
CROSS_INITS = ("random", "zero")


def check_extra(what: str, in_extra: int, out_extra: int, cross_init: str) -> None:
    """A masked ``what`` gains new inputs or outputs (none negative), and a known cross init."""
    if in_extra < 0 or out_extra < 0 or in_extra + out_extra == 0:
        raise WidthError(f"a masked {what} needs new channels, got in {in_extra}, out {out_extra}")
    if cross_init not in CROSS_INITS:
        raise WidthError(f"cross_init {cross_init!r}: expected one of {', '.join(CROSS_INITS)}")


def uniform_init(
    shape: tuple[int, ...], fan_in: int, like: torch.Tensor, gen: torch.Generator | None
) -> torch.Tensor:
    """torch's default Conv2d/Linear init (kaiming-uniform, a=sqrt(5)): U(-1/sqrt(fan_in), ..)."""
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    out = torch.empty(shape, dtype=like.dtype)
    out.uniform_(-bound, bound, generator=gen)
    return out.to(like.device)
