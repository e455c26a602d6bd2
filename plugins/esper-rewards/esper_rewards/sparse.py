"""``rewards.sparse``: exactly zero until the last step, then
``clip(val_acc/100 − param_weight·ln(1 + output_params/budget), −clip, clip)``.

``output_params`` counts the seeds that affect the final model's output (fossils, and
seeds still BLENDING or HOLDING at the end); a seed that never blended costs nothing.
The budget is ``budget_params`` when set (an absolute parameter count), otherwise
``budget_host_fraction × host_params``. The cost is logarithmic: with the default
``param_weight`` 0.01, every e-fold of seed parameters over the budget costs one point
of accuracy, so a seed 27 times the size of a tiny host (ln 28 ≈ 3.3 points) still pays
for itself when it brings more than 3.3 points. (A linear cost, 0.1 per budget's worth,
made that seed cost 2.7 and clipped its reward to −1 on digits `impaired`, below a
useless seed's +0.71.)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from attrs import define

from esper_core import RewardBreakdown, RewardContext, RewardSetup, hookimpl
from esper_core.config_limits import MAX_FACTOR, MAX_PARAMS
from esper_core.converter import in_range, options_field
from esper_rewards.common import check_gamma, output_params


@define
class SparseOptions:
    param_weight: float = options_field(
        0.01, in_range(0, MAX_FACTOR), "Cost per e-fold of output seed parameters over the budget."
    )
    budget_host_fraction: float = options_field(
        1.0,
        in_range(0, MAX_FACTOR, lo_open=True),
        "Budget relative to the host: budget = this × host params.",
    )
    budget_params: int | None = options_field(
        None,
        in_range(1, MAX_PARAMS, integer=True),
        "Absolute budget in parameters; overrides budget_host_fraction.",
    )
    clip: float = options_field(
        1.0, in_range(0, MAX_FACTOR, lo_open=True), "The terminal reward is clipped to ±clip."
    )


class SparseReward:
    """Zero on every step but the last; then final accuracy minus a log-size cost."""

    name: ClassVar[str] = "sparse"
    description: ClassVar[str] = (
        "0 until the last step, then clip(val_acc/100 − 0.01·ln(1 + output_params/budget), −1, 1)"
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
        size = output_params(ctx.slots_after) / self.budget(ctx.host_params)
        raw = ctx.val_acc / 100.0 - opts.param_weight * math.log1p(size)
        return RewardBreakdown.of(terminal=max(-opts.clip, min(opts.clip, raw)))


@hookimpl
def esper_register_rewards(register: Any) -> None:
    register(SparseReward)
