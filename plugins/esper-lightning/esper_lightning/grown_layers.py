"""A Lightning checkpoint of a module whose own layers grew, loaded into the module as built.

Lightning loads a resumed checkpoint's ``state_dict`` into the module strictly, before any
callback hook, while the module still has the layout it was built with: the layers a
growth widened are wider in the checkpoint, and a widening still ramping adds tensors of
its own (``<layer>.esper_widening.*``). Those entries are set aside by parameter name
before that load, which then takes the module's own tensors for them; once the callback
has replayed the growths on the module (``Grower.load_state_dict``), they are put back by
name, each checked to fit the grown layout first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from esper_core.errors import CheckpointError


def set_aside(state: dict[str, Any], built: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Take out of ``state`` (a checkpoint's ``state_dict``, edited in place) every tensor
    the module as ``built`` cannot load: a name it lacks is removed, a tensor of another
    shape is replaced by the module's own. Returns what was taken, by name."""
    aside: dict[str, torch.Tensor] = {}
    for name in list(state):
        value, own = state[name], built.get(name)
        if not torch.is_tensor(value):
            continue
        if own is None:
            aside[name] = state.pop(name)
        elif torch.is_tensor(own) and own.shape != value.shape:
            aside[name] = value
            state[name] = own
    return aside


def put_back(module: nn.Module, aside: Mapping[str, torch.Tensor]) -> None:
    """Load the tensors :func:`set_aside` took into ``module``, now grown as it was when
    the checkpoint was saved; a name it lacks, or a shape it does not have, is refused in
    one line before any is loaded."""
    current = module.state_dict()
    unfit = [
        name
        for name, value in aside.items()
        if name not in current or current[name].shape != value.shape
    ]
    if unfit:
        shown = ", ".join(unfit[:3]) + (f" and {len(unfit) - 3} more" if len(unfit) > 3 else "")
        raise CheckpointError(
            f"this checkpoint's grown layers do not fit the module once its growths are "
            f"replayed ({shown}): resume it with the module and EsperGrowth options it was "
            "saved with"
        )
    module.load_state_dict(dict(aside), strict=False)
