"""``rewards.loss``: validation-loss improvement + potential-based shaping − parameter rent.

Sign convention (the earlier implementation had it inverted): the loss term is
``clip((val_loss_prev − val_loss) / typical_delta, −loss_clip, loss_clip)``, so a
LOWER validation loss gives a POSITIVE reward. ``typical_delta`` is
``typical_delta_fraction × chance_loss`` (chance loss = ln(num_classes) for
classification), so one default suits tasks whose losses live on different scales.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.converter import in_range, options_field
from esper_rewards.common import ShapingRentOptions, check_gamma, refused, rent, shaping


@define
class LossOptions(ShapingRentOptions):
    typical_delta_fraction: float = options_field(
        0.05,
        in_range(0, lo_open=True),
        "Typical per-epoch loss improvement, as a fraction of the chance loss ln(classes).",
    )
    loss_clip: float = options_field(
        1.0, in_range(0, lo_open=True), "The normalised loss improvement is clipped to ±loss_clip."
    )
    refused_penalty: float = options_field(
        0.05, in_range(0), "Subtracted when the env refuses the action (illegal or failed gate)."
    )


def loss_improvement(ctx: RewardContext, opts: LossOptions) -> float:
    """Normalised, clipped ``val_loss_prev − val_loss``: positive when the loss went down."""
    if not math.isfinite(ctx.val_loss):
        return -opts.loss_clip  # a diverged model is the worst outcome, never a neutral one
    if not math.isfinite(ctx.val_loss_prev):
        return 0.0  # no finite reference to improve on (the governor restored the model)
    typical = opts.typical_delta_fraction * max(ctx.chance_loss, 1e-12)
    normalised = (ctx.val_loss_prev - ctx.val_loss) / typical
    return max(-opts.loss_clip, min(opts.loss_clip, normalised))


class LossReward:
    """Validation-loss improvement (lower loss = positive), PBRS and a parameter rent."""

    name: ClassVar[str] = "loss"
    description: ClassVar[str] = (
        "normalised, clipped validation-loss improvement (lower loss = positive) "
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
            loss=loss_improvement(ctx, opts),
            shaping=shaping(ctx, opts, self.gamma),
            rent=rent(ctx.seed_params, ctx.host_params, opts),
            refused=refused(ctx, opts.refused_penalty),
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(LossReward)
