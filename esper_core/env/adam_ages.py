"""Adam's step count for a parameter folded from pieces of different ages.

torch's Adam and AdamW keep one step count ``t`` per parameter and divide its moments by
``1 - beta ** t`` (bias correction). A width growth's fold assembles one parameter from
pieces that stepped apart: the old parameter ``k`` times, a new piece ``j < k`` times
(since its birth), or never. No one step count, and no rescaling of the young moments,
gives the young slices the step they would take as parameters of their own: the step's
gradient enters the corrected first moment with weight ``(1 - beta1) / (1 - beta1 ** t)``,
which depends on the age ``t`` itself. (Rescaling a slice's moments by
``(1 - beta ** k) / (1 - beta ** j)`` keeps its corrected moments at the fold, but its
next step weighs the new gradient as if the slice were ``k`` steps old, tens of percent
off for a slice a few steps old; the old count without a rescale moved new rows up to
three times too far.)

So the folded parameter keeps every piece's moments as they are and the oldest piece's
step count, and its state records each younger slice's lag ``k - j`` (:data:`LAG_KEY`).
After every optimizer step a post-hook (:func:`correct_young_slices`) moves those slices
from the update torch took, corrected with ``t``, to Adam's at their own age ``t - lag``.
Nothing else in the step depends on the step count (the moments' running means,
amsgrad's maximum, the weight decay, decoupled or in the gradient), so the folded
parameter steps as its pieces would have, to rounding; a slice that never stepped takes
Adam's first step. Once ``beta ** (t - lag)`` is negligible the two corrections agree to
float precision and the lag is dropped.

The hook must be on the optimizer: the env's (:func:`~esper_core.env.optimizers.make_optimizer`)
and the Grower's user optimizer (``LoopTrainer.attach``) have it; an Adam built elsewhere
steps the young slices at the old count until hooked. The pieces are assumed to share
their group's hyper-parameters (a growth's new pieces join their old parameter's group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from esper_core.lifecycle.width_fold import FoldedParam

# In a folded parameter's optimizer state: {"lags": [int, ...], "masks": [tensor, ...]},
# each mask 1 on the slices that lag its parameter's step count by that many steps.
# Masks rather than one tensor of lags: a checkpoint casts state tensors to the
# parameter's dtype, and 0 and 1 are exact in every dtype.
LAG_KEY = "esper_step_lag"
# Below this, the corrections at a slice's age and at the parameter's differ by less than
# a float32 parameter resolves (6e-8 relative) by orders of magnitude.
NEGLIGIBLE = 1e-10
# Where the step count lives on an accelerator, whether a lag has run out is checked
# every this many steps: the check syncs with the host.
CHECK_EVERY = 256


def is_adam(optimizer: torch.optim.Optimizer) -> bool:
    """torch's Adam or AdamW (a subclass), whose state this module keeps."""
    return isinstance(optimizer, torch.optim.Adam)


def own_lags(state: dict[str, Any], like: torch.Tensor) -> torch.Tensor:
    """The per-element lags a piece carries from an earlier fold (zeros if none)."""
    lags = torch.zeros_like(like, dtype=torch.int64)
    entry = state.get(LAG_KEY)
    if entry is not None:
        for lag, mask in zip(entry["lags"], entry["masks"]):
            lags += lag * mask.to(torch.int64)
    return lags


def assembled_step(states: Sequence[dict[str, Any]], fold: FoldedParam) -> dict[str, Any]:
    """The step count of a parameter ``fold`` assembled, under Adam: the oldest piece's,
    and the lag of every younger slice (a piece without state has never stepped)."""
    steps = [int(s["step"]) if "step" in s else 0 for s in states]
    oldest = max(range(len(steps)), key=steps.__getitem__)
    k = steps[oldest]
    lags = fold.assemble([own_lags(s, p) + (k - j) for s, p, j in zip(states, fold.pieces, steps)])
    out: dict[str, Any] = {"step": states[oldest]["step"].clone()}
    distinct = [int(lag) for lag in lags.unique().tolist() if lag]
    if distinct:
        like = fold.merged
        masks = [(lags == lag).to(dtype=like.dtype) for lag in distinct]
        out[LAG_KEY] = {"lags": distinct, "masks": masks}
    return out


def _update(group: dict[str, Any], age: Any, m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What Adam subtracts from a parameter at ``age`` (its step count after the step),
    the moments ``m`` and ``v`` updated, computed as torch computes it."""
    beta1, beta2 = group["betas"]
    step_size = group["lr"] / (1 - beta1**age)
    denom = v.sqrt() / (1 - beta2**age) ** 0.5 + group["eps"]
    return step_size * m / denom


def _age(t: Any, lag: int) -> Any:
    # At least 1: only a fused step GradScaler skipped (an inf) leaves a slice at 0, and
    # such a step moves nothing.
    return (t - lag).clamp(min=1) if isinstance(t, torch.Tensor) else max(t - lag, 1)


def _correct(
    p: torch.Tensor, state: dict[str, Any], group: dict[str, Any], skipped: Any, check: bool
) -> bool:
    """Give ``p``'s young slices Adam's step at their own age; whether their lag is spent."""
    step = state["step"]
    on_host = step.device.type == "cpu"
    t = step.item() if on_host else step
    m = state["exp_avg"]
    v = state["max_exp_avg_sq"] if group["amsgrad"] else state["exp_avg_sq"]
    took = _update(group, t, m, v)
    entry = state[LAG_KEY]
    fix = torch.zeros_like(p)
    for lag, mask in zip(entry["lags"], entry["masks"]):
        fix += mask * (took - _update(group, _age(t, lag), m, v))
    if skipped is not None:  # a fused step GradScaler skipped (an inf) moved nothing
        fix *= skipped == 0
    with torch.no_grad():
        p.add_(fix)
    if not (on_host or check):
        return False
    youngest = float(t) - max(entry["lags"])
    return bool(max(group["betas"]) ** youngest < NEGLIGIBLE)


class YoungSliceCorrection:
    """The post-step hook of :func:`correct_young_slices`."""

    def __init__(self) -> None:
        self._steps = 0

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._steps += 1
        check = self._steps % CHECK_EVERY == 0
        skipped = getattr(optimizer, "found_inf", None)  # set by GradScaler, fused only
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state.get(p)
                if not state or LAG_KEY not in state or "step" not in state:
                    continue
                if _correct(p, state, group, skipped, check):
                    del state[LAG_KEY]


def correct_young_slices(optimizer: torch.optim.Optimizer) -> RemovableHandle | None:
    """Hook ``optimizer`` (an Adam or AdamW; else nothing) so that the slices of a folded
    parameter younger than the rest step at their own age (see the module docstring)."""
    if not is_adam(optimizer):
        return None
    return optimizer.register_step_post_hook(YoungSliceCorrection())
