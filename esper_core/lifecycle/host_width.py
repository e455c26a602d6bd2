"""Host width growth: widen a CNN host's conv stages behind a mask ramped by an alpha
schedule, then fold the mask away (fossilize) or restore the old stages (prune).

The stages of a :class:`~esper_core.components.host.WidenableHost` named by a
:class:`WidthPlan` are replaced by :class:`~esper_core.lifecycle.width.MaskedConvStage`
(and the layer that reads the last one, the next stage or the head, gains their new
channels as inputs). One :class:`~esper_core.lifecycle.alpha.AlphaSchedule`, ticked
once per epoch like a seed's, drives every mask of the growth: at birth alpha is 0 and
the host computes bit for bit what it computed before. Stages follow the seed lifecycle's
names: BLENDING while the ramp runs, HOLDING at alpha 1, then FOSSILIZED or PRUNED.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch
from attrs import frozen
from torch import nn

from esper_core.components.host import WidenableHost
from esper_core.lifecycle import rules
from esper_core.lifecycle.alpha import CURVES, AlphaSchedule
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.width import (
    FoldedParam,
    MaskedConvStage,
    MaskedLinearInput,
    WidthError,
)

if TYPE_CHECKING:
    from esper_core.lifecycle.model import MorphogeneticModel


@frozen
class WidthPlan:
    """Which conv stages to widen (indices, ascending) and to how many channels each."""

    stages: tuple[int, ...]
    channels: tuple[int, ...]

    def describe(self) -> str:
        return ", ".join(f"stage {s} -> {c}" for s, c in zip(self.stages, self.channels))


def widenable(host: nn.Module) -> WidenableHost:
    """``host`` as a :class:`WidenableHost`, or a one-line error saying it is not one."""
    if not isinstance(host, WidenableHost):
        raise WidthError(
            f"{type(host).__name__} cannot grow in width: host width growth needs a CNN host "
            "with conv_stages(), stage_channels(), set_stage_channels() and a linear head "
            "(esper_core.components.host.WidenableHost), such as the tasks' CNNHost"
        )
    return host


def plan_by_factor(host: nn.Module, factor: float, stages: Sequence[int] = ()) -> WidthPlan:
    """Widen ``stages`` (all when empty) to ``round(factor x`` their channels``)``."""
    current = widenable(host).stage_channels()
    chosen = tuple(sorted(set(stages))) if stages else tuple(range(len(current)))
    bad = [s for s in chosen if not 0 <= s < len(current)]
    if bad:
        raise WidthError(
            f"stage(s) {', '.join(map(str, bad))} out of range: this host has stages "
            f"0..{len(current) - 1}"
        )
    return WidthPlan(chosen, tuple(max(round(current[s] * factor), 1) for s in chosen))


class HostWidthGrowth:
    """One width growth of ``model``'s host, in flight from construction on.

    ``generator`` initialises the new parameters (so a run's growth is reproducible);
    ``cross_init``: see :class:`~esper_core.lifecycle.width.MaskedConvStage`.
    """

    def __init__(
        self,
        model: MorphogeneticModel,
        plan: WidthPlan,
        *,
        tempo: int = 5,
        curve: str = "linear",
        cross_init: str = "random",
        generator: torch.Generator | None = None,
        born_epoch: int = 0,
    ) -> None:
        if curve not in CURVES:
            raise WidthError(f"curve {curve!r}: expected one of {', '.join(CURVES)}")
        if tempo < 1:
            raise WidthError(f"tempo {tempo}: the ramp needs at least 1 epoch")
        self.model = model
        self.host = widenable(model.host)
        self.plan = plan
        self.cross_init = cross_init
        self.born_epoch = born_epoch
        self.old_channels = self.host.stage_channels()
        self.new_channels = _new_channels(self.old_channels, plan)
        self.schedule = AlphaSchedule(curve=curve, ticks=tempo)
        self.stage = Stage.BLENDING
        self._check_slots()
        stages = self.host.conv_stages()
        self._originals: dict[int, nn.Module] = {}  # stage index (or -1: head) -> module
        self._masked: dict[int, MaskedConvStage | MaskedLinearInput] = {}
        extra = [n - o for n, o in zip(self.new_channels, self.old_channels)]
        for i, base in enumerate(stages):
            in_extra = extra[i - 1] if i > 0 else 0
            if in_extra or extra[i]:
                if not isinstance(base, nn.Sequential):
                    raise WidthError(f"stage {i} is a {type(base).__name__}, not an nn.Sequential")
                self._masked[i] = MaskedConvStage(base, in_extra, extra[i], generator, cross_init)
        if extra[-1]:
            head = self.host.head
            if not isinstance(head, nn.Linear):
                raise WidthError(
                    f"the head is a {type(head).__name__}; width growth needs nn.Linear"
                )
            self._masked[-1] = MaskedLinearInput(head, extra[-1], generator, cross_init)
        for i, module in self._masked.items():
            self._originals[i] = self._install(i, module)
        self.host.set_stage_channels(self.new_channels)
        self._refresh_slots()

    # ------------------------------------------------------------ state

    @property
    def alpha(self) -> float:
        return self.schedule.value

    @property
    def in_flight(self) -> bool:
        # A growth is never GERMINATED or TRAINING: live means BLENDING or HOLDING.
        return self.stage in rules.LIVE_STAGES

    def new_parameters(self) -> list[nn.Parameter]:
        """The parameters this growth added, while it is in flight."""
        return [p for m in self._masked.values() for p in m.new_parameters()]

    def new_param_count(self) -> int:
        return sum(p.numel() for p in self.new_parameters())

    def set_alpha(self, value: float) -> None:
        """Set every mask of the growth (a checkpoint's, or a test's)."""
        for module in self._masked.values():
            if isinstance(module, MaskedConvStage):
                module.mask.fill_(value)

    def tick(self) -> float:
        """One epoch of the ramp; at its end the growth is HOLDING (alpha 1)."""
        if not self.in_flight:
            self._refuse("tick")
        value = self.schedule.tick()
        self.set_alpha(value)
        if self.schedule.done and value == self.schedule.target:
            self.stage = Stage.HOLDING
        return value

    # ------------------------------------------------------------ fossilize / prune

    def fossilize(self) -> list[FoldedParam]:
        """Fold the masks away: the host's stages become plain modules of the new width.
        Returns how each new parameter was assembled, for the optimizer's state."""
        if self.stage != Stage.HOLDING:
            self._refuse("fossilize")
        folded: list[FoldedParam] = []
        for i, module in self._masked.items():
            plain, parts = module.fold()
            self._install(i, plain)
            folded.extend(parts)
        self._masked.clear()
        self.stage = Stage.FOSSILIZED
        return folded

    def prune(self) -> None:
        """Put the original stages back: the host computes what the growth computed at
        alpha 0 (its old parameters have trained on meanwhile)."""
        if self.stage not in rules.PRUNABLE_STAGES:
            self._refuse("prune")
        for i, module in self._originals.items():
            self._install(i, module)
        self._masked.clear()
        self.host.set_stage_channels(self.old_channels)
        self._refresh_slots()
        self.stage = Stage.PRUNED

    # ------------------------------------------------------------ helpers

    def _refuse(self, call: str) -> None:
        raise rules.LifecycleError(self.stage, None, call=f"width growth {call}")

    def _install(self, index: int, module: nn.Module) -> nn.Module:
        """Put ``module`` in place of stage ``index`` (-1: the head); return what was there."""
        if index < 0:
            old = self.host.head
            self.host.head = module
            return old
        stages = self.host.conv_stages()
        old = cast(nn.Module, stages[index])
        stages[index] = module
        return old

    def _changed_slots(self) -> list[str]:
        """The slots whose activations change width: after a widened stage, or before one
        (a branch seed there produces the next stage's width)."""
        changed = []
        for slot in self.model.iter_slots():
            spec = slot.spec
            segment = spec.segment
            nxt = segment + 1
            if self.new_channels[segment] != self.old_channels[segment] or (
                nxt < len(self.old_channels) and self.new_channels[nxt] != self.old_channels[nxt]
            ):
                changed.append(slot.slot_id)
        return changed

    def affected_slots(self) -> list[str]:
        """Slots that must stay empty while the growth is in flight."""
        return self._changed_slots()

    def _check_slots(self) -> None:
        for slot_id in self._changed_slots():
            slot = self.model.slot(slot_id)
            if slot.stage in rules.SEED_STAGES:
                raise WidthError(
                    f"width growth ({self.plan.describe()}) changes the width at slot "
                    f"{slot_id}, which holds a seed ({slot.stage.name}); widen other stages, "
                    "or grow the width before germinating there"
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
