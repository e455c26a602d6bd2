"""``rewards.simplified``: PBRS, a cost per non-WAIT action, and a terminal reward
``3·val_acc/100 + 2·(fossils that contribute)``."""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.converter import in_range, options_field
from esper_core.lifecycle.actions import LifecycleOp
from esper_rewards.common import ShapingOptions, check_gamma, shaping


@define
class SimplifiedOptions(ShapingOptions):
    intervention_cost: float = options_field(
        0.01, in_range(0), "Cost of every non-WAIT action (applied or refused)."
    )
    terminal_accuracy_weight: float = options_field(
        3.0, in_range(0), "Last step: terminal_accuracy_weight·val_acc/100."
    )
    terminal_fossil_bonus: float = options_field(
        2.0, in_range(0), "Last step: this much per fossil that contributes (>= 1 point)."
    )


class SimplifiedReward:
    """PBRS + per-action cost + terminal accuracy and contributing-fossil bonus."""

    name: ClassVar[str] = "simplified"
    description: ClassVar[str] = (
        "PBRS − cost per non-WAIT action + terminal 3·val_acc/100 + 2·contributing fossils"
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
        return RewardBreakdown.of(
            shaping=shaping(ctx, opts, self.gamma),
            intervention=-opts.intervention_cost if ctx.op != LifecycleOp.WAIT else 0.0,
            terminal_accuracy=opts.terminal_accuracy_weight * ctx.val_acc / 100.0 if last else 0.0,
            terminal_fossils=opts.terminal_fossil_bonus * ctx.fossils_contributing if last else 0.0,
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(SimplifiedReward)
