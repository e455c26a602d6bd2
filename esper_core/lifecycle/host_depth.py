"""Host depth growth: more residual blocks on top of a transformer's stack, each behind a
mask ramped by an alpha schedule (:mod:`esper_core.lifecycle.deepening`), then folded
into plain blocks (fossilize) or taken out again (prune).

``stack`` is G_stack (Du et al., 2024): the whole stack copied on itself, ``factor`` times
as deep (``[b1, b2] -> [b1, b2, b1', b2']``); ``identity`` inserts as many fresh blocks.
Either way the host computes bit for bit what it did at birth (alpha 0). A CNN host's
stages are not residual (each changes its width and resolution), so no copy of one can
start as the identity: such a host is refused in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from esper_core.components.host import DeepenableTransformer
from esper_core.lifecycle.deepening import DEPTH_MODES, StackDeepening
from esper_core.lifecycle.host_growth import GrowthError, HostGrowth

if TYPE_CHECKING:
    from esper_core.lifecycle.model import MorphogeneticModel

MAX_DEPTH_FACTOR = 8


class DepthError(GrowthError):
    """A host cannot grow in depth as asked."""


def deepenable(host: nn.Module) -> DeepenableTransformer:
    """``host`` as a host that can grow in depth, or a one-line error saying it is not one."""
    if not isinstance(host, DeepenableTransformer):
        raise DepthError(
            f"{type(host).__name__} cannot grow in depth: host depth growth (deepen_at) "
            "needs a transformer host of residual blocks (esper_core.components.host."
            "DeepenableTransformer, such as the tasks' TransformerHost: --task charlm); a "
            "CNN host's stages are not residual, so grow it with widen_at or conv seeds"
        )
    return host


def check_depth(mode: str, factor: int) -> None:
    if mode not in DEPTH_MODES:
        raise DepthError(f"depth mode {mode!r}: expected one of {', '.join(DEPTH_MODES)}")
    if not 2 <= factor <= MAX_DEPTH_FACTOR:
        raise DepthError(
            f"depth factor {factor}: the stack grows 2 to {MAX_DEPTH_FACTOR} times as deep"
        )


class HostDepthGrowth(HostGrowth):
    """One depth growth of ``model``'s host, in flight from construction on: the stack
    ``factor`` times as deep, its new blocks copies (``mode = "stack"``) or fresh ones
    (``"identity"``, initialised from ``generator``)."""

    operator: ClassVar[str] = "depth"

    def __init__(
        self,
        model: MorphogeneticModel,
        mode: str = "stack",
        factor: int = 2,
        *,
        tempo: int = 5,
        curve: str = "linear",
        generator: torch.Generator | None = None,
        born_epoch: int = 0,
    ) -> None:
        super().__init__(model, tempo=tempo, curve=curve, born_epoch=born_epoch)
        check_depth(mode, factor)
        self.host = deepenable(model.host)
        self.mode, self.factor = mode, factor
        deepening = StackDeepening(self.host, mode, factor, generator)
        self.old_depth, self.new_depth = deepening.old_depth, deepening.new_depth
        self._install(deepening)

    def describe(self) -> str:
        return f"n_layer {self.old_depth} -> {self.new_depth}, {self.mode}"
