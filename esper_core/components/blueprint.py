"""Blueprints: named recipes for seed modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    from torch import nn

TOPOLOGIES = ("cnn", "transformer")


@frozen
class Blueprint:
    """A seed recipe.

    ``factory(channels)`` returns an ``nn.Module`` whose output has the shape of its
    input: ``[B, C, H, W]`` at any spatial size for ``cnn``, ``[B, T, C]`` at any
    sequence length for ``transformer``. ``param_estimate(channels)`` states its
    parameter count (checked within 10% by the tests); ``identity_at_birth`` says
    whether a freshly built module returns its input unchanged.
    """

    name: str
    topology: str
    factory: Callable[[int], nn.Module]
    param_estimate: Callable[[int], int]
    description: str = ""
    identity_at_birth: bool = False

    @property
    def key(self) -> str:
        return f"{self.topology}/{self.name}"

    def build(self, channels: int) -> nn.Module:
        return self.factory(channels)
