"""Host depth growth: more residual blocks on top of a transformer's stack
(:mod:`esper_operators.deepening`), or more conv layers in a CNN's stages before
their pools (:mod:`esper_operators.deepening_cnn`), each behind a mask ramped by an
alpha schedule, then folded into plain blocks or layers (fossilize) or taken out again
(prune).

``stack`` is G_stack (Du et al., 2024): the whole stack copied on itself, ``factor`` times
as deep (``[b1, b2] -> [b1, b2, b1', b2']``; a CNN stage copies its channel-preserving
layers); ``identity`` inserts fresh blocks or layers. Either way the host computes bit
for bit what it did at birth (alpha 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn

from esper_core.components.host import DeepenableCNN, DeepenableTransformer
from esper_core.lifecycle.host_growth import DepthError, HostGrowth
from esper_operators.deepening import DEPTH_MODES
from esper_operators.depth_layouts import DepthLayout, layout_of

if TYPE_CHECKING:
    from esper_core.lifecycle.host_growth import GrowingModel

MAX_DEPTH_FACTOR = 8


def deepenable(host: nn.Module) -> DeepenableTransformer | DeepenableCNN:
    """``host`` as a host that can grow in depth, or a one-line error saying it is not one."""
    layout_of(host)
    return cast("DeepenableTransformer | DeepenableCNN", host)


def check_plan(
    host: nn.Module,
    mode: str,
    factor: int,
    stages: tuple[int, ...] = (),
    layout: DepthLayout | None = None,
) -> None:
    """Refuse (one line) a depth growth ``host`` cannot take, before the run trains;
    ``layout``: the operator's (None: the one ``host`` declares)."""
    check_depth(mode, factor)
    (layout if layout is not None else layout_of(host)).check(host, mode, stages)


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
    (``"identity"``, initialised from ``generator``); a CNN's ``stages`` (all when empty)
    each ``factor`` times as deep before their pools."""

    operator: ClassVar[str] = "depth"

    def __init__(
        self,
        model: GrowingModel,
        mode: str = "stack",
        factor: int = 2,
        *,
        stages: tuple[int, ...] = (),
        tempo: int = 5,
        curve: str = "linear",
        generator: torch.Generator | None = None,
        born_epoch: int = 0,
        layout: DepthLayout | None = None,
    ) -> None:
        super().__init__(model, tempo=tempo, curve=curve, born_epoch=born_epoch)
        check_depth(mode, factor)
        self.layout = layout if layout is not None else layout_of(model.host)
        self.layout.check(model.host, mode, stages)
        self.mode, self.factor = mode, factor
        self.host = model.host
        deepened = self.layout.deepen(self.host, mode, factor, stages, generator)
        self.stages = deepened.stages
        self.old_depths, self.new_depths = deepened.old_depths, deepened.new_depths
        self._install(deepened.operation)

    @property
    def old_depth(self) -> int:
        return sum(self.old_depths)

    @property
    def new_depth(self) -> int:
        return sum(self.new_depths)

    def sizes(self, after: bool) -> dict[str, int]:
        """The depths by the name a reader knows: a transformer's ``n_layer``, a CNN
        stage's conv layers before its pool (``stage0_layers``)."""
        return self.layout.sizes(self.new_depths if after else self.old_depths)

    def scale(self) -> float:
        return float(self.factor)

    def record(self) -> dict[str, Any]:
        return {"mode": self.mode, "factor": self.factor, "stages": self.stages}

    def describe(self) -> str:
        return self.layout.describe(self.old_depths, self.new_depths, self.mode)
