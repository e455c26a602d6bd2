"""Folding a masked width growth into plain modules: each new parameter assembled from
its pieces, with the recipe kept (:class:`FoldedParam`) so the optimizer's state for the
pieces can be assembled the same way (:func:`esper_core.env.optimizers.carry_state`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from attrs import frozen
from torch import nn


@frozen
class FoldedParam:
    """A parameter of a folded module and the pieces it was assembled from:
    ``assemble(tensors)`` builds it from ``pieces`` (or any tensors shaped like them, such
    as their optimizer state)."""

    merged: nn.Parameter
    pieces: tuple[torch.Tensor, ...]  # parameters (torch types some of them as tensors)
    assemble: Callable[[Sequence[torch.Tensor]], torch.Tensor]


def cat0(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat(list(parts), dim=0)


def cat1(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat(list(parts), dim=1)


def conv_assembler(
    has_cross: bool, has_out: bool
) -> Callable[[Sequence[torch.Tensor]], torch.Tensor]:
    """A widened kernel from its pieces ``[old, cross?, out?]``: old outputs are the old
    kernel and (if new inputs) the cross kernel side by side; new outputs are rows below."""

    def assemble(parts: Sequence[torch.Tensor]) -> torch.Tensor:
        it = iter(parts)
        rows = next(it)
        if has_cross:
            rows = torch.cat([rows, next(it)], dim=1)
        if has_out:
            rows = torch.cat([rows, next(it)], dim=0)
        return rows

    return assemble


def set_assembled(
    module: nn.Module,
    name: str,
    pieces: tuple[torch.Tensor, ...],
    assemble: Callable[[Sequence[torch.Tensor]], torch.Tensor],
) -> FoldedParam:
    """Set ``module.name`` to the parameter assembled from ``pieces``; record how."""
    with torch.no_grad():
        merged = nn.Parameter(assemble([p.detach() for p in pieces]).clone())
    setattr(module, name, merged)
    return FoldedParam(merged, pieces, assemble)


Norm = TypeVar("Norm", nn.BatchNorm1d, nn.BatchNorm2d)


def fold_norm(old: Norm, new: Norm, folded: list[FoldedParam]) -> Norm:
    """One BatchNorm (1d or 2d, as ``old``) over the old channels then the new, statistics
    included."""
    wide = type(old)(
        old.num_features + new.num_features,
        old.eps,
        old.momentum,
        old.affine,
        old.track_running_stats,
    )
    like = next(iter([*old.parameters(), *old.buffers()]))
    wide = wide.to(device=like.device, dtype=like.dtype)  # a float64 or bf16 host stays so
    if old.affine:
        assert old.weight is not None and old.bias is not None
        assert new.weight is not None and new.bias is not None
        folded.append(set_assembled(wide, "weight", (old.weight, new.weight), cat0))
        folded.append(set_assembled(wide, "bias", (old.bias, new.bias), cat0))
    if old.track_running_stats:
        assert old.running_mean is not None and new.running_mean is not None
        assert old.running_var is not None and new.running_var is not None
        assert wide.running_mean is not None and wide.running_var is not None
        assert wide.num_batches_tracked is not None and old.num_batches_tracked is not None
        with torch.no_grad():
            wide.running_mean.copy_(torch.cat([old.running_mean, new.running_mean]))
            wide.running_var.copy_(torch.cat([old.running_var, new.running_var]))
            # The old channels' count: it drives the momentum only when momentum is None.
            wide.num_batches_tracked.copy_(old.num_batches_tracked)
    return wide
