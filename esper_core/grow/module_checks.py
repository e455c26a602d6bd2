"""What the library API holds a user's model and example input to, shared by the
``Grower`` (through :func:`~esper_core.grow.module_host.host_from_module`) and the public
:func:`~esper_core.grow.layer_growth.widenable_layers`: each wrong argument is one
``HostError`` line naming it, not a torch error from deep inside a forward or a copy."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from esper_core.errors import HostError


def check_arguments(model: Any, example_input: Any) -> None:
    """``model`` an ``nn.Module`` and ``example_input`` a tensor, or one line saying which
    is not."""
    if not isinstance(model, nn.Module):
        raise HostError(
            f"model: expected a torch.nn.Module, got {type(model).__name__}; wrap a function "
            "in an nn.Module whose forward calls it"
        )
    if not isinstance(example_input, torch.Tensor):
        raise HostError(
            f"example_input: expected a torch.Tensor (one batch of inputs), got "
            f"{type(example_input).__name__}"
        )


def slot_names(slots: Any) -> list[str]:
    """``slots`` as a list of submodule names (any iterable of strings: a generator is read
    once); one line for a single string (its characters would pass for names), a number
    or anything else."""
    if isinstance(slots, str) or not isinstance(slots, Iterable):
        shown = f"the string {slots!r}" if isinstance(slots, str) else type(slots).__name__
        raise HostError(
            f"slots: expected a list of submodule names, got {shown}; write slots=[{slots!r}] "
            "with names from model.named_modules()"
            if isinstance(slots, str)
            else f"slots: expected a list of submodule names, got {shown}; write "
            "slots=['layer1', ...] with names from model.named_modules()"
        )
    names = list(slots)
    for name in names:
        if not isinstance(name, str):
            raise HostError(
                f"slots: {name!r} ({type(name).__name__}) is not a submodule's name; name "
                f"each as model.named_modules() does, e.g. {str(name)!r}"
            )
    return names


def rejected(model: nn.Module, example_input: torch.Tensor, exc: BaseException) -> HostError:
    """The one line for a forward of ``model`` that failed on ``example_input``."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HostError(
        f"example_input of shape {tuple(example_input.shape)}: {type(model).__name__} "
        f"rejects it ({first}); pass one batch as the model's forward takes it, in shape "
        f"and dtype (this one is {example_input.dtype})"
    )


def dry_run(model: nn.Module, example_input: torch.Tensor) -> Any:
    """``model``'s output on ``example_input`` in eval mode without gradient (BatchNorm
    statistics and the random state untouched); :func:`rejected` if the forward fails."""
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            return model(example_input)
    except Exception as exc:
        raise rejected(model, example_input, exc) from exc
    finally:
        model.train(was_training)


def copied(model: nn.Module, why: str) -> nn.Module:
    """A deep copy of ``model`` (``why``: what it is for), or one line naming what in the
    model cannot be copied."""
    try:
        return copy.deepcopy(model)
    except Exception as exc:  # whatever the user's attributes raise when copied
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if "graph leaves" in first:  # torch's words for a weight computed in a forward
            what = (
                "it holds a weight computed from others (the old torch.nn.utils.weight_norm "
                "or spectral_norm); use torch.nn.utils.parametrizations.weight_norm or "
                "spectral_norm instead"
            )
        else:
            what = (
                f"{first}; keep locks, open files and other objects that cannot be copied "
                "outside the module, or give their holder a __deepcopy__"
            )
        raise HostError(f"{type(model).__name__} cannot be copied ({why}): {what}") from None
