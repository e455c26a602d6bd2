"""``rewards.simplified``: PBRS, a cost per non-WAIT action, and a terminal reward
``3·val_acc/100`` (+ ``terminal_fossil_bonus`` per fossil whose gain reaches
``useful_gain`` points; 0 by default, see :class:`SimplifiedOptions`)."""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.components.reward import SlotSnapshot
from esper_core.config_limits import MAX_FACTOR
from esper_core.converter import in_range, options_field
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.rules import FOSSIL_STAGES
from esper_rewards.common import ShapingOptions, check_gamma, shaping


@define
class SimplifiedOptions(ShapingOptions):
    intervention_cost: float = options_field(
        0.01, in_range(0, MAX_FACTOR), "Cost of every non-WAIT action (applied or refused)."
    )
    terminal_accuracy_weight: float = options_field(
        3.0, in_range(0, MAX_FACTOR), "Last step: terminal_accuracy_weight·val_acc/100."
    )
    # Off by default: measured on digits `impaired`, fossils of the useless `norm` seed
    # showed gains of +5 to +22 points (the host's own progress since the seed joined)
    # while ending below `wait`, so any bonus per fossil paid for useless growth. The
    # terminal accuracy already pays a useful fossil for what it brings.
    terminal_fossil_bonus: float = options_field(
        0.0,
        in_range(0, MAX_FACTOR),
        "Last step: this much per fossil whose gain is >= useful_gain.",
    )
    useful_gain: float = options_field(
        1.0,
        in_range(-100, 100),
        "Gain (validation points since the seed touched the output) of a useful fossil.",
    )


def useful_fossils(slots: tuple[SlotSnapshot, ...], threshold: float) -> int:
    return sum(
        1 for s in slots if s.stage in FOSSIL_STAGES and s.gain is not None and s.gain >= threshold
    )


class SimplifiedReward:
    """PBRS + per-action cost + terminal accuracy (+ an optional bonus per useful fossil)."""

    name: ClassVar[str] = "simplified"
    description: ClassVar[str] = (
        "PBRS − cost per non-WAIT action + terminal 3·val_acc/100 "
        "(+ optional bonus per fossil with a measured gain)"
    )
    Options: ClassVar[type] = SimplifiedOptions
    components: ClassVar[tuple[str, ...]] = (
        "shaping",
        "intervention",
        "terminal_accuracy",
        "terminal_fossils",
    )

    def __init__(self, options: SimplifiedOptions, setup: RewardSetup) -> None:
        self.options = options
        self.gamma = check_gamma(setup.gamma)

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        opts = self.options
        last = ctx.is_last_step
        fossils = useful_fossils(ctx.slots_after, opts.useful_gain) if last else 0
        return RewardBreakdown.of(
            shaping=shaping(ctx, opts, self.gamma),
            intervention=-opts.intervention_cost if ctx.op != LifecycleOp.WAIT else 0.0,
            terminal_accuracy=opts.terminal_accuracy_weight * ctx.val_acc / 100.0 if last else 0.0,
            terminal_fossils=opts.terminal_fossil_bonus * fossils,
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(SimplifiedReward)
