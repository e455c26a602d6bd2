"""``rewards.pbrs``: accuracy improvement + potential-based shaping − parameter rent
(+ a bonus on the final validation accuracy at the last step)."""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.config_limits import MAX_FACTOR
from esper_core.converter import in_range, options_field
from esper_rewards.common import (
    ShapingRentOptions,
    accuracy_improvement,
    check_gamma,
    refused,
    rents,
    shaping,
)


@define
class PBRSOptions(ShapingRentOptions):
    accuracy_weight: float = options_field(
        0.1,
        in_range(0, MAX_FACTOR),
        "Reward per point of (discounted) validation-accuracy improvement.",
    )
    terminal_weight: float = options_field(
        1.0, in_range(0, MAX_FACTOR), "Last-step bonus: terminal_weight·val_acc/100."
    )
    refused_penalty: float = options_field(
        0.05,
        in_range(0, MAX_FACTOR),
        "Subtracted when the env refuses the action (illegal or failed gate).",
    )


class PBRSReward:
    """Accuracy improvement, potential-based lifecycle shaping and a parameter rent."""

    name: ClassVar[str] = "pbrs"
    description: ClassVar[str] = (
        "accuracy improvement + potential-based shaping over all slots − parameter rent "
        "+ final-accuracy bonus"
    )
    Options: ClassVar[type] = PBRSOptions
    components: ClassVar[tuple[str, ...]] = ("accuracy", "shaping", "rent", "terminal", "refused")

    options: PBRSOptions

    def __init__(self, options: PBRSOptions, setup: RewardSetup) -> None:
        self.options = options
        self.gamma = check_gamma(setup.gamma)

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        """The pbrs formula, one term per component (``shaped`` adds two)."""
        opts, gamma = self.options, self.gamma
        return RewardBreakdown.of(
            accuracy=accuracy_improvement(ctx, opts.accuracy_weight, gamma),
            shaping=shaping(ctx, opts, gamma),
            rent=rents(ctx, opts, gamma),
            terminal=opts.terminal_weight * ctx.val_acc / 100.0 if ctx.is_last_step else 0.0,
            refused=refused(ctx, opts.refused_penalty),
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(PBRSReward)
