"""Helpers shared by the lifecycle core tests: slots built from the fakes, driven to a stage."""

from __future__ import annotations

import torch
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.host import InjectionSpec
from esper_core.lifecycle.gates import GateThresholds
from esper_core.lifecycle.rules import COOLDOWN_STAGES, next_gated_target
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.slot_state import SlotSettings
from esper_core.lifecycle.stages import Stage
from tests.fakes import BLUEPRINTS, RES_RANDOM

# Every seed through the staged lifecycle GERMINATED -> TRAINING -> BLENDING.
STAGED = {"isolation": "full", "isolation_non_identity": "full"}
# Permissive gates with no minimum TRAINING time, so a slot reaches any stage in a few calls.
FAST = SlotSettings(gates=GateThresholds(min_training_epochs=0), **STAGED)


class LinearResidual(nn.Module):
    """A transformer-topology seed: ``x + fc(x)`` on ``[B, T, C]``, randomly initialised."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc(x)


LIN_RES = Blueprint(
    "lin_res", "transformer", LinearResidual, lambda c: c * c + c, "linear residual"
)


def resolve_any(key: str) -> Blueprint:
    return {bp.key: bp for bp in (*BLUEPRINTS, LIN_RES)}[key]


def make_slot(settings: SlotSettings = FAST, channels: int = 4) -> SeedSlot:
    return SeedSlot(InjectionSpec("r0c0", channels, "cnn", 0), resolve_any, settings)


def healthy(slot: SeedSlot) -> None:
    """Record the measurements of a seed whose gradients are fine (G2 and G5 health)."""
    slot.state.record_gradients(1.0, False, 1.0, 1.0)


def drive_to(
    slot: SeedSlot,
    stage: Stage,
    *,
    blueprint: Blueprint = RES_RANDOM,
    style: str = "linear_add",
    tempo: int = 1,
) -> SeedSlot:
    """Move an empty slot to ``stage`` through legal transitions only, satisfying each gate.

    BLENDING is left right after the advance (alpha = curve(1/tempo)); cooldown stages are
    reached by pruning a GERMINATED seed and ticking the cooldown.
    """
    assert slot.stage == Stage.DORMANT, slot.stage
    if stage == Stage.DORMANT:
        return slot
    slot.germinate("seed", blueprint, style, tempo=tempo)
    if stage in COOLDOWN_STAGES:
        slot.prune()
        while slot.stage != stage:
            assert slot.stage != Stage.DORMANT, f"cooldown settings skip {stage}"
            slot.end_epoch()
        return slot
    order = [Stage.GERMINATED]  # then each gated step: up to FOSSILIZED
    while (after := next_gated_target(order[-1])) is not None:
        order.append(after)
    for target in order[1 : order.index(stage) + 1]:
        if target == Stage.BLENDING:
            while slot.state.epochs_in_stage < slot.settings.gates.min_training_epochs:
                slot.end_epoch()
            healthy(slot)
        if target == Stage.HOLDING:
            strict_min = (
                slot.settings.gates.strict_min_blending_epochs if slot.settings.gates.strict else 0
            )
            while not slot.state.alpha_schedule.done or slot.state.epochs_in_stage < strict_min:
                slot.end_epoch()
        if target == Stage.FOSSILIZED:
            healthy(slot)
            slot.state.record_contribution(2.0)
            result = slot.fossilize()
        else:
            result = slot.advance()
        assert result.passed, result.reason
    assert slot.stage == stage
    return slot
