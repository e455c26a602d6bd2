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

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from esper_core.components.host import DeepenableCNN, DeepenableTransformer
from esper_core.lifecycle.host_growth import DepthError, GrowthError, HostGrowth
from esper_operators.deepening import DEPTH_MODES, StackDeepening
from esper_operators.deepening_cnn import ConvDeepening, chosen_stages, stackable

if TYPE_CHECKING:
    from esper_core.lifecycle.host_growth import GrowingModel

MAX_DEPTH_FACTOR = 8


def deepenable(host: nn.Module) -> DeepenableTransformer | DeepenableCNN:
    """``host`` as a host that can grow in depth, or a one-line error saying it is not one."""
    if not isinstance(host, (DeepenableTransformer, DeepenableCNN)):
        raise DepthError(
            f"{type(host).__name__} cannot grow in depth: host depth growth (deepen_at) "
            "needs a transformer host of residual blocks (esper_core.components.host."
            "DeepenableTransformer, such as the tasks' TransformerHost) or a CNN host of "
            "conv stages (DeepenableCNN, such as the tasks' CNNHost)"
        )
    return host


def check_plan(host: nn.Module, mode: str, factor: int, stages: tuple[int, ...] = ()) -> None:
    """Refuse (one line) a depth growth ``host`` cannot take, before the run trains."""
    check_depth(mode, factor)
    deep = deepenable(host)
    if isinstance(deep, DeepenableTransformer):
        if stages:
            raise DepthError(
                f"deepen_stages {list(stages)} given, but a transformer host deepens its "
                "whole stack; leave deepen_stages empty"
            )
        return
    try:
        chosen_stages(deep, stages)
        stackable(deep, mode, stages)
    except GrowthError as exc:
        raise DepthError(str(exc)) from None


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
    ) -> None:
        super().__init__(model, tempo=tempo, curve=curve, born_epoch=born_epoch)
        check_plan(model.host, mode, factor, stages)
        host = deepenable(model.host)
        self.mode, self.factor = mode, factor
        self.stages: tuple[int, ...] = ()
        self.old_depths: tuple[int, ...]
        self.new_depths: tuple[int, ...]
        self.host: DeepenableTransformer | DeepenableCNN
        operation: StackDeepening | ConvDeepening
        if isinstance(host, DeepenableTransformer):
            stack = StackDeepening(host, mode, factor, generator)
            self.old_depths, self.new_depths = (stack.old_depth,), (stack.new_depth,)
            self.host, operation = host, stack
        else:
            convs = ConvDeepening(host, mode, factor, stages, generator)
            # As asked (empty: every stage), so a checkpoint replays the same plan.
            self.stages = tuple(stages)
            self.old_depths, self.new_depths = convs.old_depths, convs.new_depths
            self.host, operation = host, convs
        self._install(operation)

    @property
    def old_depth(self) -> int:
        return sum(self.old_depths)

    @property
    def new_depth(self) -> int:
        return sum(self.new_depths)

    def sizes(self, after: bool) -> dict[str, int]:
        """The depths by the name a reader knows: a transformer's ``n_layer``, a CNN
        stage's conv layers before its pool (``stage0_layers``)."""
        depths = self.new_depths if after else self.old_depths
        if isinstance(self.host, DeepenableTransformer):
            return {"n_layer": depths[0]}
        return {f"stage{i}_layers": d for i, d in enumerate(depths)}

    def scale(self) -> float:
        return float(self.factor)

    def record(self) -> dict[str, Any]:
        return {"mode": self.mode, "factor": self.factor, "stages": self.stages}

    def describe(self) -> str:
        if isinstance(self.host, DeepenableTransformer):
            return f"n_layer {self.old_depth} -> {self.new_depth}, {self.mode}"
        grown = [
            f"stage {i} layers {a} -> {b}"
            for i, (a, b) in enumerate(zip(self.old_depths, self.new_depths))
            if a != b
        ]
        return f"{', '.join(grown)}, {self.mode}"
