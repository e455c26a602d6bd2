"""Whether a user's optimizer fits the model it is given with, and the seeds' group.

Both are checked when the optimizer is attached, before any seed joins it: an optimizer
built over another model's parameters trains nothing the grower grows (the user's own
model would not train either), and a ``seed_group`` hyper-parameter the optimizer does
not know, or a learning rate of -1, would otherwise reach the optimizer's step as a key
it ignores or an update in the wrong direction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from esper_core.errors import GrowerError

# Hyper-parameters that are rates or penalties: a finite number >= 0 (torch's own rule
# when it builds an optimizer, which a group added later does not go through).
_NON_NEGATIVE = ("lr", "weight_decay", "momentum", "dampening", "eps")


def check_owns_model(
    optimizer: torch.optim.Optimizer, model_params: Iterable[nn.Parameter], where: str
) -> None:
    """Refuse an optimizer none of whose parameters is the model's."""
    own = {id(p) for p in model_params}
    held = [p for group in optimizer.param_groups for p in group["params"]]
    if held and not any(id(p) in own for p in held):
        raise GrowerError(
            f"{where}: none of the optimizer's {len(held)} parameters belongs to the model "
            "given to the grower; build it from this model's parameters "
            "(e.g. torch.optim.AdamW(model.parameters()))"
        )


def check_seed_group(
    options: Mapping[str, Any], optimizer: torch.optim.Optimizer, where: str
) -> None:
    """Every ``seed_group`` key a hyper-parameter of ``optimizer``, each rate a finite
    number >= 0."""
    known = sorted(optimizer.defaults)
    for key, value in options.items():
        if key == "params" or key not in optimizer.defaults:
            raise GrowerError(
                f"{where}: seed_group key {key!r} is not a hyper-parameter of "
                f"{type(optimizer).__name__} ({', '.join(known)}); use one of those"
            )
        if key in _NON_NEGATIVE and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise GrowerError(
                f"{where}: seed_group {key} = {value!r:.40}, but it must be a finite number >= 0"
            )
