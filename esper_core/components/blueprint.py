"""Blueprints: named recipes for seed modules."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

if TYPE_CHECKING:
    from torch import nn

TOPOLOGIES = ("cnn", "transformer")
# A blueprint's key (topology/name) names it in configs, checkpoints and file names.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")


def _topology(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in TOPOLOGIES:
        raise ValueError(f"blueprint topology {value!r} is not one of {', '.join(TOPOLOGIES)}")


def _name(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            f"blueprint name {value!r} is not a plain name (up to 64 letters, digits and _ . + -)"
        )


@frozen
class Blueprint:
    """A seed recipe.

    ``factory(channels)`` returns an ``nn.Module`` whose output has the shape of its
    input: ``[B, C, H, W]`` at any spatial size for ``cnn``, ``[B, T, C]`` at any
    sequence length for ``transformer``. ``param_estimate(channels)`` states its
    parameter count; ``identity_at_birth`` says whether a freshly built module returns
    its input unchanged. A run checks all of it when it builds each module
    (:mod:`esper_core.lifecycle.blueprint_check`).
    """

    name: str = field(validator=_name)
    topology: str = field(validator=_topology)
    factory: Callable[[int], nn.Module]
    param_estimate: Callable[[int], int]
    description: str = ""
    identity_at_birth: bool = False
    # Stacking births: ``inherit(seed, block)`` copies a host block's weights into a freshly
    # built seed (``lifecycle.stack_blocks``); None for blueprints that cannot.
    inherit: Callable[[nn.Module, nn.Module], None] | None = None

    @property
    def key(self) -> str:
        return f"{self.topology}/{self.name}"

    def build(self, channels: int) -> nn.Module:
        return self.factory(channels)
