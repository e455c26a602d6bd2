"""How each kind of host this plugin deepens is deepened: a request's checks, the gated
modules of a growth with the depths before and after, and the names its depths go by.
Each depth operator holds its layout, so what a growth does to a host follows from the
operator that grows it; only a caller that names no operator (a test building a growth
by hand) has one found for it (:func:`layout_of`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, cast

from attrs import frozen

from esper_core.components.host import DeepenableCNN, DeepenableTransformer, InjectionSpec
from esper_core.lifecycle.host_growth import DepthError, GrowthError, HostOperation

if TYPE_CHECKING:
    import torch
    from torch import nn


@frozen
class Deepened:
    """A depth growth's gated modules, the depths before and after (one per stage; a
    transformer's stack is one), and the stages its record keeps (as the request named
    them, so a checkpoint replays the same plan)."""

    operation: HostOperation
    old_depths: tuple[int, ...]
    new_depths: tuple[int, ...]
    stages: tuple[int, ...] = ()


class DepthLayout(ABC):
    """One kind of host's depths: a transformer's stack of blocks, a CNN's stages."""

    @abstractmethod
    def check(self, host: nn.Module, mode: str, stages: tuple[int, ...]) -> None:
        """Refuse (a one-line DepthError) a request ``host`` cannot take."""

    @abstractmethod
    def deepen(
        self,
        host: nn.Module,
        mode: str,
        factor: int,
        stages: tuple[int, ...],
        generator: torch.Generator | None,
    ) -> Deepened:
        """The gated modules that deepen ``host`` ``factor`` times."""

    @abstractmethod
    def sizes(self, depths: tuple[int, ...]) -> dict[str, int]:
        """The depths by the names a reader knows."""

    @abstractmethod
    def describe(self, old: tuple[int, ...], new: tuple[int, ...], mode: str) -> str: ...

    @abstractmethod
    def touches(self, host: nn.Module, stages: tuple[int, ...], slot: InjectionSpec) -> bool:
        """Whether deepening ``stages`` of ``host`` changes what a seed at ``slot`` sees
        (as the growth's own ``touches`` says once it is in flight)."""


class StackLayout(DepthLayout):
    """A transformer's stack of residual blocks, deepened as a whole."""

    def check(self, host: nn.Module, mode: str, stages: tuple[int, ...]) -> None:
        if stages:
            raise DepthError(
                f"deepen_stages {list(stages)} given, but a transformer host deepens its "
                "whole stack; leave deepen_stages empty"
            )

    def deepen(
        self,
        host: nn.Module,
        mode: str,
        factor: int,
        stages: tuple[int, ...],
        generator: torch.Generator | None,
    ) -> Deepened:
        from esper_operators.deepening import StackDeepening

        stack = StackDeepening(cast(DeepenableTransformer, host), mode, factor, generator)
        return Deepened(stack, (stack.old_depth,), (stack.new_depth,))

    def sizes(self, depths: tuple[int, ...]) -> dict[str, int]:
        return {"n_layer": depths[0]}

    def describe(self, old: tuple[int, ...], new: tuple[int, ...], mode: str) -> str:
        return f"n_layer {sum(old)} -> {sum(new)}, {mode}"

    def touches(self, host: nn.Module, stages: tuple[int, ...], slot: InjectionSpec) -> bool:
        return slot.segment == cast(DeepenableTransformer, host).num_segments() - 1


class StagesLayout(DepthLayout):
    """A CNN's conv stages, each deepened before its pool."""

    def check(self, host: nn.Module, mode: str, stages: tuple[int, ...]) -> None:
        from esper_operators.deepening_cnn import chosen_stages, stackable

        cnn = cast(DeepenableCNN, host)
        try:
            chosen_stages(cnn, stages)
            stackable(cnn, mode, stages)
        except GrowthError as exc:
            raise DepthError(str(exc)) from None

    def deepen(
        self,
        host: nn.Module,
        mode: str,
        factor: int,
        stages: tuple[int, ...],
        generator: torch.Generator | None,
    ) -> Deepened:
        from esper_operators.deepening_cnn import ConvDeepening

        convs = ConvDeepening(cast(DeepenableCNN, host), mode, factor, stages, generator)
        return Deepened(convs, convs.old_depths, convs.new_depths, tuple(stages))

    def sizes(self, depths: tuple[int, ...]) -> dict[str, int]:
        return {f"stage{i}_layers": d for i, d in enumerate(depths)}

    def describe(self, old: tuple[int, ...], new: tuple[int, ...], mode: str) -> str:
        grown = [f"stage {i} layers {a} -> {b}" for i, (a, b) in enumerate(zip(old, new)) if a != b]
        return f"{', '.join(grown)}, {mode}"

    def touches(self, host: nn.Module, stages: tuple[int, ...], slot: InjectionSpec) -> bool:
        from esper_operators.deepening_cnn import chosen_stages

        return slot.segment in chosen_stages(cast(DeepenableCNN, host), stages)


STACK, STAGES = StackLayout(), StagesLayout()


def layout_of(host: nn.Module) -> DepthLayout:
    """The layout of a ``host`` no operator was named for, or a one-line DepthError
    saying it cannot grow in depth."""
    if isinstance(host, DeepenableTransformer):
        return STACK
    if isinstance(host, DeepenableCNN):
        return STAGES
    raise DepthError(
        f"{type(host).__name__} cannot grow in depth: host depth growth (deepen_at) "
        "needs a transformer host of residual blocks (esper_core.components.host."
        "DeepenableTransformer, such as the tasks' TransformerHost) or a CNN host of "
        "conv stages (DeepenableCNN, such as the tasks' CNNHost)"
    )
