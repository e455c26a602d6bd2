"""How each kind of host this plugin widens is widened: its plan by a factor, the masked
modules of a growth, and the names its widths go by. Each width operator holds its
layout, so what a growth does to a host follows from the operator that grows it; only a
caller that names no operator (a test building a growth by hand) has one found for it
(:func:`layout_of`)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from attrs import frozen

from esper_core.components.host import (
    HasWidths,
    InjectionSpec,
    WidenableHost,
    WidenableTransformer,
    WidensItsLayers,
)
from esper_core.lifecycle.host_growth import HostOperation, WidthError

if TYPE_CHECKING:
    import torch
    from torch import nn


@frozen
class WidthPlan:
    """Which stages to widen (indices, ascending) and to how many channels each (a
    transformer has one: its residual width ``d_model``)."""

    stages: tuple[int, ...]
    channels: tuple[int, ...]

    def describe(self) -> str:
        return ", ".join(f"stage {s} -> {c}" for s, c in zip(self.stages, self.channels))


def plan_d_model(host: WidenableTransformer, factor: float, stages: Sequence[int]) -> WidthPlan:
    """A transformer's plan: ``d_model`` in every block at once, by whole heads."""
    current = host.stage_channels()
    if stages:
        raise WidthError(
            f"width stages {list(stages)} given, but a transformer host widens d_model "
            "in every block at once; leave widen_stages empty"
        )
    step = host.width_step()
    wide = round(current[0] * factor)
    _adds_width("d_model", current[0], wide, factor)
    if wide % step:
        raise WidthError(
            f"d_model {current[0]} x {factor:g} = {wide} is not a multiple of the head "
            f"dimension {step}; choose a factor that gives one (heads keep their size)"
        )
    return WidthPlan((0,), (wide,))


def plan_stages(current: tuple[int, ...], factor: float, stages: Sequence[int]) -> WidthPlan:
    """A plan of stages (a CNN's, a user's layer pairs): each named one ``factor`` wider."""
    chosen = tuple(sorted(set(stages))) if stages else tuple(range(len(current)))
    bad = [s for s in chosen if not 0 <= s < len(current)]
    if bad:
        raise WidthError(
            f"stage(s) {', '.join(map(str, bad))} out of range: this host has stages "
            f"0..{len(current) - 1}"
        )
    widths_after = tuple(max(round(current[s] * factor), 1) for s in chosen)
    for s, c in zip(chosen, widths_after):
        _adds_width(f"stage {s}", current[s], c, factor)
    return WidthPlan(chosen, widths_after)


def _adds_width(what: str, old: int, new: int, factor: float) -> None:
    """A factor that rounds back to the width it started from widens nothing (it was
    refused only at the growth's epoch, after the run's first part had trained)."""
    if new <= old:
        least = math.ceil(((old + 0.5) / old + 1e-9) * 1000) / 1000  # round() halves to even
        raise WidthError(
            f"{what} is {old} wide and x {factor:g} rounds to {new}: nothing to widen; "
            f"choose a factor of at least {least:g}"
        )


class WidthLayout(ABC):
    """One kind of host's widths: a CNN's conv stages, a transformer's ``d_model``, a
    Grower user's layer pairs."""

    @abstractmethod
    def plan(self, host: HasWidths, factor: float, stages: Sequence[int]) -> WidthPlan:
        """Widen ``stages`` (all when empty) ``factor`` times, or a one-line WidthError."""

    @abstractmethod
    def widening(
        self,
        host: HasWidths,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> HostOperation:
        """The masked modules that widen ``host`` from widths ``old`` to ``new``."""

    def sizes(self, channels: tuple[int, ...]) -> dict[str, int]:
        """The widths by the names a reader knows (``stage0``...)."""
        return {f"stage{i}": c for i, c in enumerate(channels)}

    def describe(self, host: HasWidths, old: tuple[int, ...], plan: WidthPlan) -> str:
        return plan.describe()

    def touches(self, plan: WidthPlan, slot: InjectionSpec) -> bool:
        """Whether ``plan`` changes the width a seed at ``slot`` works at (here: every
        slot, as a transformer's residual width; a layout that can say less says so)."""
        return True


class ConvLayout(WidthLayout):
    """A CNN's conv stages (and the head reading the last one)."""

    def plan(self, host: HasWidths, factor: float, stages: Sequence[int]) -> WidthPlan:
        return plan_stages(host.stage_channels(), factor, stages)

    def touches(self, plan: WidthPlan, slot: InjectionSpec) -> bool:
        from esper_operators.widening import conv_touches

        return conv_touches(plan.stages, slot.segment)

    def widening(
        self,
        host: HasWidths,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> HostOperation:
        from esper_operators.widening import ConvWidening

        return ConvWidening(cast(WidenableHost, host), old, new, generator, cross_init)


class TransformerLayout(WidthLayout):
    """A transformer's residual width ``d_model``, in every module at once."""

    def plan(self, host: HasWidths, factor: float, stages: Sequence[int]) -> WidthPlan:
        return plan_d_model(cast(WidenableTransformer, host), factor, stages)

    def widening(
        self,
        host: HasWidths,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> HostOperation:
        from esper_operators.width_transformer import ResidualWidening

        host = cast(WidenableTransformer, host)
        return ResidualWidening(host, old[0], new[0], generator, cross_init)

    def sizes(self, channels: tuple[int, ...]) -> dict[str, int]:
        return {"d_model": channels[0]}

    def describe(self, host: HasWidths, old: tuple[int, ...], plan: WidthPlan) -> str:
        return f"d_model {old[0]} -> {plan.channels[0]}"


class LayersLayout(WidthLayout):
    """A Grower user's layer pairs, which the host widens itself, named by their layers."""

    def plan(self, host: HasWidths, factor: float, stages: Sequence[int]) -> WidthPlan:
        layers = cast(WidensItsLayers, host)
        if not layers.stage_channels():
            # A user's module with no layer pair that can widen: a plan would widen nothing.
            raise WidthError(layers.width_refusal())
        return plan_stages(layers.stage_channels(), factor, stages)

    def widening(
        self,
        host: HasWidths,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> HostOperation:
        layers = cast(WidensItsLayers, host)
        return cast(HostOperation, layers.layer_widening(old, new, generator, cross_init))

    def describe(self, host: HasWidths, old: tuple[int, ...], plan: WidthPlan) -> str:
        names = cast(WidensItsLayers, host).stage_names()
        return ", ".join(f"{names[s]}: {old[s]} -> {c}" for s, c in zip(plan.stages, plan.channels))


CONV, TRANSFORMER, LAYERS = ConvLayout(), TransformerLayout(), LayersLayout()


def layout_of(host: nn.Module) -> WidthLayout:
    """The layout of a ``host`` no operator was named for, or a one-line WidthError
    saying it cannot grow in width."""
    if isinstance(host, WidensItsLayers):
        if not host.stage_channels():
            raise WidthError(host.width_refusal())
        return LAYERS
    if isinstance(host, WidenableTransformer):
        return TRANSFORMER
    if isinstance(host, WidenableHost):
        return CONV
    raise WidthError(
        f"{type(host).__name__} cannot grow in width: host width growth needs a CNN "
        "host (esper_core.components.host.WidenableHost, such as the tasks' CNNHost) or "
        "a transformer host (WidenableTransformer, such as the tasks' TransformerHost)"
    )
