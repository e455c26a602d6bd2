"""``rewards.shaped``: pbrs + attribution by measured gain + a per-intervention cost.

Attribution is a second potential-based term over the seeds that touch the output,
``attribution = γ·Ψ(s′) − Ψ(s)`` with

    Ψ(s) = Σ_slots  fossil_gain_weight · clip(gain, ±gain_cap)   for a FOSSILIZED seed
                  + live_gain_weight   · clip(gain, ±gain_cap)   for a BLENDING/HOLDING seed

where ``gain`` is the seed's measured gain (validation accuracy now minus validation
accuracy just before it first touched the output, in points). So, as it happens:

- a live seed whose gain falls (a harmful seed) costs, step by step;
- fossilizing a seed with a positive gain earns ``(fossil − live)·gain`` at once, and
  fossilizing one with a negative gain costs as much;
- pruning a seed with a positive gain costs ``live·gain`` at once (a harmful one earns).

Like the shaping, Ψ(s′) is taken as 0 at the last step and at a rollback
(``zero_terminal_potential``), so over an episode the attribution sums to −Ψ(s_0) = 0
whatever the policy did: it moves credit to the step that earned it and can never make
a fossil worth more than the accuracy it brings. That matters because the gain of a
seed includes the host's own progress since the seed joined (and the counterfactual
contribution measures reliance: a host co-adapted to a useless seed relies on it too);
neither can tell a useful seed from a useless one well enough to be paid for outright.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, hookimpl
from esper_core.components.reward import SlotSnapshot
from esper_core.config_limits import MAX_FACTOR
from esper_core.converter import in_range, options_field
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.rules import BLENDED_STAGES, FOSSIL_STAGES
from esper_rewards.common import terminal_state
from esper_rewards.pbrs import PBRSOptions, PBRSReward


@define
class ShapedOptions(PBRSOptions):
    live_gain_weight: float = options_field(
        0.02, in_range(0, MAX_FACTOR), "Ψ per point of gain of a BLENDING or HOLDING seed."
    )
    fossil_gain_weight: float = options_field(
        0.05,
        in_range(0, MAX_FACTOR),
        "Ψ per point of gain of a fossil (> live: fossilizing a gain earns).",
    )
    gain_cap: float = options_field(
        20.0, in_range(0, MAX_FACTOR), "A seed's gain is clipped to ±gain_cap points inside Ψ."
    )
    intervention_cost: float = options_field(
        0.01, in_range(0, MAX_FACTOR), "Cost of every non-WAIT action (applied or refused)."
    )


def slot_attribution(slot: SlotSnapshot, opts: ShapedOptions) -> float:
    if slot.stage not in BLENDED_STAGES or slot.gain is None or not math.isfinite(slot.gain):
        return 0.0
    weight = opts.fossil_gain_weight if slot.stage in FOSSIL_STAGES else opts.live_gain_weight
    return weight * max(-opts.gain_cap, min(opts.gain_cap, slot.gain))


def attribution_potential(slots: tuple[SlotSnapshot, ...], opts: ShapedOptions) -> float:
    """Ψ(s): the sum over every slot, like Φ."""
    return math.fsum(slot_attribution(slot, opts) for slot in slots)


def attribution(ctx: RewardContext, opts: ShapedOptions, gamma: float) -> float:
    """``γ·Ψ(s′) − Ψ(s)``; Ψ(s′) = 0 at a terminal step when ``zero_terminal_potential``."""
    after = 0.0 if terminal_state(ctx, opts) else attribution_potential(ctx.slots_after, opts)
    return gamma * after - attribution_potential(ctx.slots_before, opts)


class ShapedReward(PBRSReward):
    """pbrs plus attribution of seeds by measured gain and a small cost per intervention."""

    name: ClassVar[str] = "shaped"
    description: ClassVar[str] = (
        "pbrs + potential-based attribution by measured gain (harmful seeds, fossils, "
        "prunes) + per-intervention cost"
    )
    Options: ClassVar[type] = ShapedOptions
    components: ClassVar[tuple[str, ...]] = (
        "accuracy",
        "shaping",
        "rent",
        "terminal",
        "refused",
        "attribution",
        "intervention",
    )

    options: ShapedOptions

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        opts = self.options
        return (
            super()
            .compute(ctx)
            .plus(
                attribution=attribution(ctx, opts, self.gamma),
                intervention=-opts.intervention_cost if ctx.op != LifecycleOp.WAIT else 0.0,
            )
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(ShapedReward)
