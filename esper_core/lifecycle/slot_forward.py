"""The forward stage logic of a :class:`~esper_core.lifecycle.slot.SeedSlot`, one code
path for both kinds of seed (semantics: the slot module's docstring).

A *series* seed maps the slot's activation ``h`` to a replacement ``s = seed(h)``. A
*branch* seed is a parallel branch of the segment after its slot: it reads that
segment's input ``x`` and its increment is added to the segment's output ``h``, so
``s = h + seed(x)``. Both reach :func:`stage_forward` as a ``propose(isolated)`` callable
returning ``(s, ref)``, where ``ref`` is what ``s`` is a residual over (the series seed's
input, the branch's ``h``): it is the seed input of the blend (``multiply`` and ``gate``
styles). Where the seed is isolated everything ``s`` reads from the host is detached, so
the stages treat both kinds the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

from esper_core.lifecycle import rules
from esper_core.lifecycle.alpha import STYLES, BlendGate, blend, broadcast_alpha
from esper_core.lifecycle.isolation import any_nonfinite, finite_or_host, straight_through
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.lifecycle.slot_state import SlotSettings, SlotState
from esper_core.lifecycle.stages import Stage

Proposal = Callable[[bool], tuple[torch.Tensor, torch.Tensor]]


class ForwardSlot(Protocol):
    """What the stage logic reads of a slot (:class:`~esper_core.lifecycle.slot.SeedSlot`
    is one): a protocol, so this module sits below the slot instead of importing it."""

    state: SlotState
    settings: SlotSettings
    gate: BlendGate | None
    forced_alpha: torch.Tensor | float | None  # set by SeedSlot.alpha_override

    @property
    def slot_id(self) -> str: ...

    @property
    def alpha_tensor(self) -> torch.Tensor: ...

    @property
    def nonfinite_outputs(self) -> torch.Tensor: ...


def series(seed: nn.Module, h: torch.Tensor) -> Proposal:
    """``s = seed(h)``, on ``h.detach()`` when isolated."""

    def propose(isolated: bool) -> tuple[torch.Tensor, torch.Tensor]:
        x = h.detach() if isolated else h
        return seed(x), x

    return propose


def branch(seed: nn.Module, x: torch.Tensor, h: torch.Tensor) -> Proposal:
    """``s = h + seed(x)``, both host tensors detached when isolated."""

    def propose(isolated: bool) -> tuple[torch.Tensor, torch.Tensor]:
        base = h.detach() if isolated else h
        return base + seed(x.detach() if isolated else x), base

    return propose


def alpha_for(slot: ForwardSlot, h: torch.Tensor) -> torch.Tensor | float:
    """The slot's alpha for activation ``h``: its override (``SeedSlot.alpha_override``)
    broadcast over ``h``, else the scheduled alpha."""
    override = slot.forced_alpha
    return slot.alpha_tensor if override is None else broadcast_alpha(override, h, slot.slot_id)


def stage_forward(slot: ForwardSlot, h: torch.Tensor, propose: Proposal) -> torch.Tensor:
    """The slot's output for host activation ``h`` and its seed's proposal, by stage."""
    stage = slot.state.stage
    if stage == Stage.TRAINING:
        if not torch.is_grad_enabled():
            return h  # the output equals h; the seed only needs to run to learn
        s, _ = propose(True)
        slot.nonfinite_outputs.add_(any_nonfinite(s))
        return straight_through(h, s)
    if stage not in BLENDED_STAGES:
        return h
    isolated = rules.is_isolated(stage, slot.state.alpha)
    raw, ref = propose(isolated)
    s, bad = finite_or_host(raw, h)
    slot.nonfinite_outputs.add_(bad)
    alpha = alpha_for(slot, h)
    alpha_t = alpha if isinstance(alpha, torch.Tensor) else torch.full((), alpha, device=h.device)
    operator = STYLES[slot.state.style or "linear_add"].operator
    gate = slot.gate(ref) if operator == "gate" and slot.gate is not None else None
    straight = isolated and slot.settings.blend_host_gradient == "full"
    return blend(operator, h, s, alpha_t, ref, gate, host_straight_through=straight)
