"""Builders of reward contexts for the reward-family tests."""

from __future__ import annotations

import math
from typing import Any

from esper_rewards.loss import LossReward
from esper_rewards.pbrs import PBRSReward
from esper_rewards.shaped import ShapedReward
from esper_rewards.simplified import SimplifiedReward
from esper_rewards.sparse import SparseReward

from esper_core.components.reward import RewardContext, RewardSetup, SlotSnapshot
from esper_core.converter import structure
from esper_core.lifecycle.actions import Action, LifecycleOp
from esper_core.lifecycle.stages import Stage

FAMILIES = (PBRSReward, ShapedReward, SimplifiedReward, SparseReward, LossReward)
SHAPING_FAMILIES = (PBRSReward, ShapedReward, SimplifiedReward, LossReward)
SLOT_IDS = ("r0c0", "r0c1", "r0c2", "r0c3")


def snap(
    slot_id: str,
    stage: Stage,
    epochs: int = 0,
    contribution: float | None = None,
    params: int = 0,
    alpha: float = 0.0,
    gain: float | None = None,
) -> SlotSnapshot:
    return SlotSnapshot(slot_id, stage, epochs, alpha, contribution, params, gain)


def dormant(n: int = 3) -> tuple[SlotSnapshot, ...]:
    return tuple(snap(SLOT_IDS[i], Stage.DORMANT) for i in range(n))


def ctx(**overrides: Any) -> RewardContext:
    """A mid-episode WAIT step with nothing happening; override what a test needs."""
    op = overrides.pop("op", LifecycleOp.WAIT)
    slot = overrides.pop("slot", 0)
    values: dict[str, Any] = {
        "action": Action(op, slot=slot),
        "op": op,
        "target_slot": None if op == LifecycleOp.WAIT else SLOT_IDS[slot],
        "applied": True,
        "epoch": 5,
        "max_epochs": 30,
        "val_acc_prev": 80.0,
        "val_acc": 80.0,
        "val_loss_prev": 0.5,
        "val_loss": 0.5,
        "slots_before": dormant(),
        "slots_after": dormant(),
        "host_params": 10_000,
        "seed_params": 0,
        "fossil_params": 0,
        "chance_loss": math.log(10),
    }
    values.update(overrides)
    return RewardContext(**values)


def family(cls: type, gamma: float = 0.9, **options: Any) -> Any:
    """A family built the way a run builds it: options through the one converter."""
    return cls(
        structure(options, cls.Options, path=f"rewards.{cls.name}"), RewardSetup(gamma=gamma)
    )
