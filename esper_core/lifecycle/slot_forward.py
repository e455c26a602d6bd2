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

A seed keeps the widths it was born at (``seed_spec``). Where the host widened around a
fossil, the slot's activations carry more channels than the seed knows: the seed acts
on the old ones (the first ``seed_spec`` channels) exactly as before, and the new ones
pass through it unchanged (:func:`run_series`, :func:`run_branch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

from esper_core.components.host import InjectionSpec
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
    spec: InjectionSpec
    seed_spec: InjectionSpec  # the spec the seed was built for

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


def channel_dim(topology: str) -> int:
    """Where a slot's activation keeps its channels: dim 1 of a CNN's ``[B, C, H, W]``, the
    last of a sequence's ``[B, T, D]`` and an MLP's ``[B, F]``."""
    return 1 if topology == "cnn" else -1


def _split(h: torch.Tensor, width: int, dim: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``h``'s first ``width`` channels and the rest; None where ``h`` has no more."""
    extra = h.shape[dim] - width
    if extra == 0:
        return None
    old, new = h.split([width, extra], dim)
    return old, new


def run_series(slot: ForwardSlot, seed: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """A series seed's slot output for ``h``, the seed on the channels it was born with."""
    dim = channel_dim(slot.spec.topology)
    parts = _split(h, slot.seed_spec.channels, dim)
    if parts is None:
        return stage_forward(slot, h, series(seed, h))
    old, new = parts
    return torch.cat([stage_forward(slot, old, series(seed, old)), new], dim)


def run_branch(
    slot: ForwardSlot, seed: nn.Module, x: torch.Tensor, h: torch.Tensor
) -> torch.Tensor:
    """A branch seed's merged output: the seed reads the channels of ``x`` it was born
    with and adds to those of ``h`` it was born producing."""
    dim = channel_dim(slot.spec.topology)
    born = slot.seed_spec
    assert born.next_channels is not None, "a branch seed is born where a segment follows"
    if x.shape[dim] != born.channels:
        x = x.narrow(dim, 0, born.channels)
    parts = _split(h, born.next_channels, dim)
    if parts is None:
        return stage_forward(slot, h, branch(seed, x, h))
    old, new = parts
    return torch.cat([stage_forward(slot, old, branch(seed, x, old)), new], dim)
