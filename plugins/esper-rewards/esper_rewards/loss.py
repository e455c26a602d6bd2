"""``rewards.loss``: validation-loss improvement + potential-based shaping − parameter rent.

Sign convention (the earlier implementation had it inverted): the loss term is
``(ℓ(val_loss_prev) − γ·ℓ(val_loss)) / typical_delta``, so a LOWER validation loss gives
a POSITIVE reward. ``ℓ(L) = min(L, loss_cap × chance_loss)`` (a non-finite loss counts
as the cap), and ``typical_delta`` is ``typical_delta_fraction × chance_loss`` (chance
loss = ln(num_classes) for classification), so one default suits tasks whose losses
live on different scales.

Like the accuracy term of ``pbrs``, the loss term is a discounted difference: over an
episode it sums to exactly ``(ℓ_0 − γ^T·ℓ_T) / typical_delta``, so the final loss is
what it pays for. (A clip of each step's change, as before, broke that sum: the clip
cut the first epochs' large drops and a small host's noisy swings unevenly.) The cap
bounds every step, diverged losses included.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.config_limits import MAX_FACTOR
from esper_core.converter import in_range, options_field
from esper_rewards.common import (
    ShapingRentOptions,
    check_gamma,
    refused,
    rents,
    shaping,
)


@define
class LossOptions(ShapingRentOptions):
    typical_delta_fraction: float = options_field(
        0.05,
        in_range(0, MAX_FACTOR, lo_open=True),
        "Typical per-epoch loss improvement, as a fraction of the chance loss ln(classes).",
    )
    loss_cap: float = options_field(
        3.0,
        in_range(0, MAX_FACTOR, lo_open=True),
        "Losses above loss_cap × chance loss (and non-finite ones) count as that much.",
    )
    refused_penalty: float = options_field(
        0.05,
        in_range(0, MAX_FACTOR),
        "Subtracted when the env refuses the action (illegal or failed gate).",
    )


def capped_loss(loss: float, opts: LossOptions, chance_loss: float) -> float:
    cap = opts.loss_cap * chance_loss
    return min(loss, cap) if math.isfinite(loss) else cap


def loss_improvement(ctx: RewardContext, opts: LossOptions, gamma: float) -> float:
    """``(ℓ(val_loss_prev) − γ·ℓ(val_loss)) / typical``: positive when the loss went down."""
    chance = max(ctx.chance_loss, 1e-12)
    typical = opts.typical_delta_fraction * chance
    before = capped_loss(ctx.val_loss_prev, opts, chance)
    return (before - gamma * capped_loss(ctx.val_loss, opts, chance)) / typical


class LossReward:
    """Validation-loss improvement (lower loss = positive), PBRS and a parameter rent."""

    name: ClassVar[str] = "loss"
    description: ClassVar[str] = (
        "normalised, discounted validation-loss improvement (lower loss = positive) "
        "+ PBRS − parameter rent"
    )
    Options: ClassVar[type] = LossOptions
    components: ClassVar[tuple[str, ...]] = ("loss", "shaping", "rent", "refused")

    def __init__(self, options: LossOptions, setup: RewardSetup) -> None:
        self.options = options
        self.gamma = check_gamma(setup.gamma)

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        opts = self.options
        return RewardBreakdown.of(
            loss=loss_improvement(ctx, opts, self.gamma),
            shaping=shaping(ctx, opts, self.gamma),
            rent=rents(ctx, opts, self.gamma),
            refused=refused(ctx, opts.refused_penalty),
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(LossReward)
