"""``rewards.sparse``: exactly zero until the last step, then
``clip(val_acc/100 − param_weight·fossil_params/budget, −clip, clip)``.

The budget is ``budget_params`` when set (an absolute parameter count), otherwise
``budget_host_fraction × host_params`` (relative to the host, the default: a fossil
set as large as the host costs ``param_weight``). Only fossils count: at the end of an
episode live seeds are not part of the final model's commitments.
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.converter import in_range, options_field
from esper_rewards.common import check_gamma


@define
class SparseOptions:
    param_weight: float = options_field(
        0.1, in_range(0), "Cost of fossil parameters equal to the budget."
    )
    budget_host_fraction: float = options_field(
        1.0, in_range(0, lo_open=True), "Budget relative to the host: budget = this × host params."
    )
    budget_params: int | None = options_field(
        None,
        in_range(1, integer=True),
        "Absolute budget in parameters; overrides budget_host_fraction.",
    )
    clip: float = options_field(
        1.0, in_range(0, lo_open=True), "The terminal reward is clipped to ±clip."
    )


class SparseReward:
    """Zero on every step but the last; then final accuracy minus a fossil-size cost."""

    name: ClassVar[str] = "sparse"
    description: ClassVar[str] = (
        "0 until the last step, then clip(val_acc/100 − 0.1·fossil_params/budget, −1, 1)"
    )
    Options: ClassVar[type] = SparseOptions
    components: ClassVar[tuple[str, ...]] = ("terminal",)

    def __init__(self, options: SparseOptions, setup: RewardSetup) -> None:
        self.options = options
        # Unused by the formula (nothing is discounted here), validated for uniformity.
        self.gamma = check_gamma(setup.gamma)

    def budget(self, host_params: int) -> float:
        opts = self.options
        if opts.budget_params is not None:
            return float(opts.budget_params)
        return max(opts.budget_host_fraction * host_params, 1.0)

    def compute(self, ctx: RewardContext) -> RewardBreakdown:
        if not ctx.is_last_step:
            return RewardBreakdown.of(terminal=0.0)
        opts = self.options
        raw = ctx.val_acc / 100.0 - opts.param_weight * ctx.fossil_params / self.budget(
            ctx.host_params
        )
        return RewardBreakdown.of(terminal=max(-opts.clip, min(opts.clip, raw)))


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(SparseReward)
