"""Host width growth: widen a host behind a mask ramped by an alpha schedule, then fold
the mask away (fossilize) or restore the old modules (prune).

Two kinds of host can grow (:mod:`esper_operators.widening` does their modules): a
CNN (:class:`~esper_core.components.host.WidenableHost`), whose conv stages named by a
:class:`WidthPlan` are replaced by :class:`~esper_operators.width_conv.MaskedConvStage`
(and the layer that reads the last one, the next stage or the head, gains their new
channels as inputs); and a transformer
(:class:`~esper_core.components.host.WidenableTransformer`), whose residual width
``d_model`` grows in every module at once
(:mod:`esper_operators.width_transformer`). One
:class:`~esper_core.lifecycle.alpha.AlphaSchedule`, ticked once per epoch like a seed's,
drives every mask of the growth: at birth alpha is 0 and the host computes bit for bit
what it computed before. Stages follow the seed lifecycle's names: BLENDING while the
ramp runs, HOLDING at alpha 1, then FOSSILIZED or PRUNED.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn

from esper_core.components.host import HasWidths
from esper_core.lifecycle import rules
from esper_core.lifecycle.host_growth import HostGrowth, WidthError
from esper_operators.widening import Widening
from esper_operators.width_layouts import WidthLayout, WidthPlan, layout_of

if TYPE_CHECKING:
    from esper_core.lifecycle.host_growth import GrowingModel


def plan_by_factor(
    host: nn.Module,
    factor: float,
    stages: Sequence[int] = (),
    layout: WidthLayout | None = None,
) -> WidthPlan:
    """Widen ``stages`` (all when empty) to ``round(factor x`` their channels``)``; a
    transformer's ``d_model`` to ``round(factor x d_model)``, which must stay a multiple of
    its head dimension. ``layout``: the operator's (None: the one ``host`` declares)."""
    layout = layout if layout is not None else layout_of(host)
    return layout.plan(cast(HasWidths, host), factor, stages)


def widening_ratio(host: nn.Module, plan: WidthPlan) -> float:
    """The plan's largest ratio of a new width to the old: each weight, and the work of
    the layer that holds it, grows at most with the ratio of its input and of its output
    widths, so at most by this ratio squared."""
    current = cast(HasWidths, host).stage_channels()
    return max(new / current[s] for s, new in zip(plan.stages, plan.channels))


def widened_weights(host: nn.Module, plan: WidthPlan) -> int:
    """An upper bound on the host's parameters once ``plan`` is done."""
    ratio = widening_ratio(host, plan)
    return math.ceil(sum(p.numel() for p in host.parameters()) * ratio**2)


class HostWidthGrowth(HostGrowth):
    """One width growth of ``model``'s host, in flight from construction on.

    ``generator`` initialises the new parameters (so a run's growth is reproducible);
    ``cross_init``: see :class:`~esper_operators.width_conv.MaskedConvStage`.
    """

    operator: ClassVar[str] = "width"

    def __init__(
        self,
        model: GrowingModel,
        plan: WidthPlan,
        *,
        tempo: int = 5,
        curve: str = "linear",
        cross_init: str = "random",
        generator: torch.Generator | None = None,
        born_epoch: int = 0,
        layout: WidthLayout | None = None,
    ) -> None:
        super().__init__(model, tempo=tempo, curve=curve, born_epoch=born_epoch)
        self.layout = layout if layout is not None else layout_of(model.host)
        self.host = cast(HasWidths, model.host)
        self.plan = plan
        self.cross_init = cross_init
        self.old_channels = self.host.stage_channels()
        self.new_channels = _new_channels(self.old_channels, plan)
        widening = self.layout.widening(
            self.host, self.old_channels, self.new_channels, generator, cross_init
        )
        self._check_slots(widening)
        self._install(widening)
        self.host.set_stage_channels(self.new_channels)
        self._refresh_slots()

    def sizes(self, after: bool) -> dict[str, int]:
        """A transformer's one width is ``d_model``; a CNN's stage widths ``stage0``..."""
        return self.layout.sizes(self.new_channels if after else self.old_channels)

    def describe(self) -> str:
        return self.layout.describe(self.host, self.old_channels, self.plan)

    def scale(self) -> float:
        pairs = zip(self.old_channels, self.new_channels)
        return round(max(new / old for old, new in pairs if new != old), 2)

    def record(self) -> dict[str, Any]:
        return {
            "stages": self.plan.stages,
            "channels": self.plan.channels,
            "cross_init": self.cross_init,
        }

    def _restored(self) -> None:
        self.host.set_stage_channels(self.old_channels)
        self._refresh_slots()

    def _check_slots(self, widening: Widening) -> None:
        for slot in self.model.iter_slots():
            # A fossil stays at its widths (slot_forward); a live seed would train on.
            if widening.touches(slot.spec) and slot.stage in rules.LIVE_STAGES:
                raise WidthError(
                    f"width growth ({self.plan.describe()}) changes the width at slot "
                    f"{slot.slot_id}, which holds a live seed ({slot.stage.name}); widen "
                    "other stages, or once the seed is fossilized or pruned"
                )

    def _refresh_slots(self) -> None:
        specs = {spec.slot_id: spec for spec in self.host.injection_specs()}
        for slot in self.model.iter_slots():
            slot.spec = specs[slot.slot_id]


def _new_channels(old: tuple[int, ...], plan: WidthPlan) -> tuple[int, ...]:
    if len(plan.stages) != len(plan.channels) or not plan.stages:
        raise WidthError("a width plan names one channel count for each of its stages")
    if len(set(plan.stages)) != len(plan.stages):
        raise WidthError(f"a width plan names stage(s) twice: {list(plan.stages)}")
    new = list(old)
    for stage, channels in zip(plan.stages, plan.channels):
        if not 0 <= stage < len(old):
            raise WidthError(f"stage {stage} out of range: this host has stages 0..{len(old) - 1}")
        if channels <= old[stage]:
            raise WidthError(
                f"stage {stage} has {old[stage]} channels; width growth needs more, got {channels}"
            )
        new[stage] = channels
    return tuple(new)


__all__ = [
    "HostWidthGrowth",
    "WidthError",
    "WidthPlan",
    "plan_by_factor",
]
