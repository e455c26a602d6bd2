"""What a host depth growth does to a CNN's conv stages: the new layers it puts in each
stage, after the stage's last conv layer and before its pool, each behind a mask, and how
they fold in or come out again.

A stage is an ``nn.Sequential``: conv layers (a ``Conv2d``, its ``BatchNorm2d``, channel-
wise modules), then its pool and any layers after the pool. Unlike a transformer's blocks
a conv layer is not residual, so a new layer ``l`` runs as ``torch.lerp(h, l(h), m)``: at
``m = 0`` that is ``h`` bit for bit (``h + 0 x (l(h) - h)``), whatever ``l``'s weights; at
``m = 1`` it is ``l(h)`` exactly, so the fold (the gate taken away, the layer's modules
spliced into the stage) changes no bit either, and leaves the stage as a host built with
that many layers names it (``blocks.0.3.weight`` is the second conv of stage 0 either
way). Each stage grows ``factor`` times as deep in its layers before the pool:
``identity`` puts ``(factor - 1) x k`` fresh ``C -> C`` layers after its ``k`` (the
host's own init); ``stack`` (G_stack on a stage) copies its channel-preserving layers, in
order, ``factor - 1`` times on top of themselves (``[l1: 3->C, l2: C->C]`` becomes
``[l1, l2, l2']``), and is refused for a stage that has none.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from esper_core.components.host import DeepenableCNN, InjectionSpec
from esper_core.lifecycle.host_growth import GrowthError
from esper_core.lifecycle.width_fold import FoldedParam
from esper_core.lifecycle.width_parts import CHANNELWISE

POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)


class GatedLayer(nn.Module):
    """A conv layer born into a stage behind :attr:`mask` (see the module docstring)."""

    def __init__(self, layer: nn.Sequential) -> None:
        super().__init__()
        self.layer = layer
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.zeros(()))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.lerp(h, self.layer(h), self.mask.to(h.dtype))


def pool_at(stage: nn.Sequential) -> int:
    """Where the stage's pool is (its length when it has none): new layers go there."""
    return next((i for i, m in enumerate(stage) if isinstance(m, POOLS)), len(stage))


def conv_layers(stage: nn.Sequential, index: int) -> list[list[nn.Module]]:
    """The stage's layers before its pool, each a conv and the modules that follow it."""
    layers: list[list[nn.Module]] = []
    for j, module in enumerate(list(stage)[: pool_at(stage)]):
        if isinstance(module, (nn.Conv2d, GatedLayer)):
            layers.append([module])
        elif layers and isinstance(module, (nn.BatchNorm2d, *CHANNELWISE)):
            layers[-1].append(module)
        else:
            raise GrowthError(
                f"stage {index}: module {j} ({type(module).__name__}) is not part of a conv "
                "layer (Conv2d, BatchNorm2d, channel-wise modules); depth growth cannot "
                "insert layers into this stage"
            )
    return layers


def _keeps_shape(conv: nn.Module) -> bool:
    """Whether ``conv`` maps ``C`` channels to ``C`` at the same resolution."""
    if not isinstance(conv, nn.Conv2d) or conv.in_channels != conv.out_channels:
        return False
    if conv.stride != (1, 1):
        return False
    if isinstance(conv.padding, str):
        return conv.padding == "same"
    return all(
        p * 2 == d * (k - 1)
        for p, d, k in zip(conv.padding, conv.dilation, conv.kernel_size, strict=True)
    )


def stage_depths(host: DeepenableCNN) -> tuple[int, ...]:
    """Each stage's conv layers before its pool (gated ones included)."""
    return tuple(len(conv_layers(s, i)) for i, s in enumerate(_stages(host)))


def _stages(host: DeepenableCNN) -> list[nn.Sequential]:
    stages = list(host.depth_stages())
    for i, stage in enumerate(stages):
        if not isinstance(stage, nn.Sequential):
            raise GrowthError(f"stage {i} is a {type(stage).__name__}, not an nn.Sequential")
    return stages  # type: ignore[return-value]


def chosen_stages(host: DeepenableCNN, stages: Sequence[int]) -> tuple[int, ...]:
    """``stages`` checked (all of them when empty), ascending."""
    n = len(host.depth_stages())
    if len(set(stages)) != len(stages):
        raise GrowthError(f"deepen_stages names a stage twice: {list(stages)}")
    bad = [s for s in stages if not 0 <= s < n]
    if bad:
        raise GrowthError(
            f"deepen_stages {', '.join(map(str, bad))} out of range: this host has stages "
            f"0..{n - 1}"
        )
    return tuple(sorted(stages)) if stages else tuple(range(n))


def stackable(host: DeepenableCNN, mode: str, stages: Sequence[int]) -> None:
    """Refuse (one line) a plan that cannot happen: a stage that is not conv layers, or
    ``stack`` on a stage with no channel-preserving layer to copy."""
    all_stages = _stages(host)
    for s in chosen_stages(host, stages):
        layers = conv_layers(all_stages[s], s)
        if mode == "stack" and not any(_keeps_shape(layer[0]) for layer in layers):
            raise GrowthError(
                f"stage {s} has no channel-preserving layer to stack; deepen it with fresh "
                'layers: mode "identity" (policies.static.deepen_mode, or the host_growth_mode '
                "of a policy that grows the host while it runs)"
            )


class ConvDeepening:
    """Each chosen stage ``factor`` times as deep before its pool (the operation of a
    :class:`~esper_operators.host_depth.HostDepthGrowth` on a CNN host)."""

    def __init__(
        self,
        host: DeepenableCNN,
        mode: str,
        factor: int,
        stages: Sequence[int],
        generator: torch.Generator | None,
    ) -> None:
        stackable(host, mode, stages)
        self.host = host
        self.stages = chosen_stages(host, stages)
        self.old_depths = stage_depths(host)
        gen = generator if generator is not None else torch.Generator()
        all_stages = _stages(host)
        channels = host.stage_channels()
        self._gated: dict[int, list[GatedLayer]] = {}
        for s in self.stages:
            layers = conv_layers(all_stages[s], s)
            if mode == "stack":
                run = [layer for layer in layers if _keeps_shape(layer[0])]
                new = [
                    nn.Sequential(*copy.deepcopy(layer)) for _ in range(factor - 1) for layer in run
                ]
            else:
                new = [host.new_layer(channels[s], gen) for _ in range((factor - 1) * len(layers))]
            self._gated[s] = [GatedLayer(layer) for layer in new]
        self.new_depths = tuple(
            d + len(self._gated.get(i, ())) for i, d in enumerate(self.old_depths)
        )
        self._at = {s: pool_at(all_stages[s]) for s in self.stages}

    def _splice(self, s: int, middle: list[nn.Module], drop: int) -> None:
        """Stage ``s`` with ``drop`` modules at its pool replaced by ``middle``, in place
        (the stage's module, and so every reference to it, stays the same)."""
        stage = _stages(self.host)[s]
        at = self._at[s]
        modules = list(stage)
        modules[at : at + drop] = middle
        for key in list(stage._modules):
            del stage._modules[key]
        for j, module in enumerate(modules):
            stage.add_module(str(j), module)

    def install(self) -> None:
        for s, gated in self._gated.items():
            self._splice(s, list(gated), 0)

    def set_mask(self, value: float) -> None:
        for gated in self._gated.values():
            for g in gated:
                g.mask.fill_(value)

    def new_parameters(self) -> list[nn.Parameter]:
        return [p for gated in self._gated.values() for g in gated for p in g.layer.parameters()]

    def fold(self) -> list[FoldedParam]:
        # The plain layers keep their parameters (the very same tensors): the optimizer's
        # state follows them as it is, nothing to assemble.
        for s, gated in self._gated.items():
            self._splice(s, [m for g in gated for m in g.layer], len(gated))
        self._gated = {}
        return []

    def restore(self) -> None:
        for s, gated in self._gated.items():
            self._splice(s, [], len(gated))
        self._gated = {}

    def touches(self, spec: InjectionSpec) -> bool:
        # A slot on a deepened stage's output: a prune would change what a seed there
        # was trained on.
        return spec.segment in self.stages
