"""``rewards.shaped``: pbrs + counterfactual attribution + a per-intervention cost.

Attribution uses the counterfactual contribution (accuracy with every seed on minus
accuracy with that seed's alpha forced to 0, in points, measured on validation):

- ``harmful_seeds``: every live seed (GERMINATED..HOLDING) the step leaves in place
  with a negative contribution costs ``harmful_weight`` per point. Keeping a seed is a
  decision the controller makes for every slot on every step, WAIT included, so this
  term covers all slots and not only the one the action addressed.
- ``fossilize_credit``: fossilizing a seed whose contribution is >= ``useful_contribution``
  earns ``fossilize_weight`` per point.
- ``prune_useful``: pruning a seed whose contribution is >= ``useful_contribution`` costs
  ``prune_weight`` per point.

Each attribution term is capped at ``attribution_cap`` in magnitude.
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.converter import in_range, options_field
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.rules import LIVE_STAGES
from esper_rewards.common import check_gamma
from esper_rewards.pbrs import PBRSOptions, pbrs_components


@define
class ShapedOptions(PBRSOptions):
    useful_contribution: float = options_field(
        1.0, in_range(0), "A seed is useful at this contribution (points) or more."
    )
    harmful_weight: float = options_field(
        0.05, in_range(0), "Cost per point of negative contribution, per live seed and step."
    )
    fossilize_weight: float = options_field(
        0.1, in_range(0), "Credit per point of contribution when fossilizing a useful seed."
    )
    prune_weight: float = options_field(
        0.1, in_range(0), "Cost per point of contribution when pruning a useful seed."
    )
    attribution_cap: float = options_field(
        1.0, in_range(0), "Largest magnitude of each attribution term per step."
    )
    intervention_cost: float = options_field(
        0.01, in_range(0), "Cost of every non-WAIT action (applied or refused)."
    )


def _useful(
    ctx: RewardContext, op: LifecycleOp, contribution: float | None, threshold: float
) -> float:
    """The contribution of the seed this applied action fossilized or pruned, if it was useful."""
    if ctx.applied and ctx.op == op and contribution is not None and contribution >= threshold:
        return contribution
    return 0.0


def attribution(ctx: RewardContext, opts: ShapedOptions) -> dict[str, float]:
    cap = opts.attribution_cap
    negative = sum(
        min(slot.contribution, 0.0)
        for slot in ctx.slots_after
        if slot.stage in LIVE_STAGES and slot.contribution is not None
    )
    fossilized = _useful(
        ctx, LifecycleOp.FOSSILIZE, ctx.fossilized_contribution, opts.useful_contribution
    )
    pruned = _useful(ctx, LifecycleOp.PRUNE, ctx.pruned_contribution, opts.useful_contribution)
    return {
        "harmful_seeds": max(opts.harmful_weight * negative, -cap),
        "fossilize_credit": min(opts.fossilize_weight * fossilized, cap),
        "prune_useful": 0.0 - min(opts.prune_weight * pruned, cap),
    }


class ShapedReward:
    """pbrs plus counterfactual attribution of seeds and a small cost per intervention."""

    name: ClassVar[str] = "shaped"
    description: ClassVar[str] = (
        "pbrs + counterfactual attribution (harmful seeds, useful fossils, useful prunes) "
        "+ per-intervention cost"
    )
    Options: ClassVar[type] = ShapedOptions
    components: ClassVar[tuple[str, ...]] = (
        "accuracy",
        "shaping",
        "rent",
        "terminal",
        "refused",
        "harmful_seeds",
        "fossilize_credit",
        "prune_useful",
        "intervention",
    )

    def __init__(self, options: ShapedOptions, setup: RewardSetup) -> None:
        self.options = options
        self.gamma = check_gamma(setup.gamma)

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        opts = self.options
        return RewardBreakdown.of(
            **pbrs_components(ctx, opts, self.gamma),
            **attribution(ctx, opts),
            intervention=-opts.intervention_cost if ctx.op != LifecycleOp.WAIT else 0.0,
        )


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(ShapedReward)
