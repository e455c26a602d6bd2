"""The torch side of a training recipe (:mod:`esper_core.recipe`): weight decay by
parameter kind, the recipe's optimizer, the learning rate of a step."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from esper_core.env.adam_ages import LAG_KEY, assembled_step, correct_young_slices, is_adam
from esper_core.recipe import Recipe

if TYPE_CHECKING:
    from esper_core.lifecycle.width_fold import FoldedParam


def embedding_parameters(modules: Iterable[nn.Module]) -> set[int]:
    """The ids of the embedding tables among ``modules`` (a tied head's weight included)."""
    return {id(m.weight) for m in modules if isinstance(m, nn.Embedding)}


def param_kind(param: nn.Parameter, embeddings: set[int]) -> str:
    """What the weight-decay rule tells apart: ``embedding`` tables, ``vector`` (norms,
    biases, scales) and ``matrix`` (linear weights and conv kernels)."""
    if id(param) in embeddings:
        return "embedding"
    return "vector" if param.ndim < 2 else "matrix"


def decays(param: nn.Parameter, recipe: Recipe, embeddings: set[int]) -> bool:
    """Whether weight decay applies: matrices and conv kernels, not norms, biases or
    embeddings (nanoGPT's and timm's rule), unless the recipe says to decay those too."""
    kind = param_kind(param, embeddings)
    if kind == "embedding":
        return recipe.decay_embeddings
    if kind == "vector":
        return recipe.decay_norms_and_biases
    return True


def param_groups(
    params: Iterable[nn.Parameter], recipe: Recipe, embeddings: set[int]
) -> list[dict[str, Any]]:
    """The parameters in a decayed and an undecayed group (an empty one is left out)."""
    decayed: list[nn.Parameter] = []
    plain: list[nn.Parameter] = []
    for p in params:
        (decayed if decays(p, recipe, embeddings) else plain).append(p)
    groups = [
        {"params": decayed, "weight_decay": recipe.weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def make_optimizer(
    groups: list[dict[str, Any]], recipe: Recipe, fused: bool = False
) -> torch.optim.Optimizer:
    """The recipe's torch optimizer over ``groups``. ``fused``: the fused kernels, whose
    step takes ``GradScaler``'s inf check as a device tensor (no host sync with fp16)."""
    if recipe.optimizer == "adamw":
        adam = torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, fused=fused or None)
        correct_young_slices(adam)  # a folded parameter's young slices (adam_ages)
        return adam
    opt = torch.optim.SGD(
        groups,
        lr=recipe.lr,
        momentum=recipe.momentum,
        nesterov=recipe.nesterov and recipe.momentum > 0,
        fused=fused or None,
    )
    if fused and recipe.momentum:
        # The fused first step allocates its momentum buffers uninitialised and, when
        # the scaler found an inf, skips the update, leaving them so. Zero buffers make
        # every step a regular one: buf = momentum * 0 + grad is the first step's buf.
        for group in groups:
            for p in group["params"]:
                opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    return opt


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def carry_state(
    old: torch.optim.Optimizer, new: torch.optim.Optimizer, folded: Sequence[FoldedParam] = ()
) -> None:
    """Give ``new`` the state ``old`` held for the parameters both optimise (the host's
    own, after a growth changed its parameter set; a depth growth's blocks keep their
    very tensors, so their state follows as it is); a parameter a fold assembled gets
    its pieces' state assembled the same way (:func:`assembled_state`). Every other
    parameter starts fresh (no momentum, zero Adam moments), as torch starts any new
    parameter. ``new`` must be hooked by :func:`correct_young_slices` if it is an Adam
    (:func:`make_optimizer` does so)."""
    assembled = {id(f.merged): f for f in folded}
    for group in new.param_groups:
        for p in group["params"]:
            if p in old.state:
                new.state[p] = dict(old.state[p])
            elif id(p) in assembled:
                state = assembled_state(old, assembled[id(p)])
                if state:
                    new.state[p] = state


def assembled_state(old: torch.optim.Optimizer, fold: FoldedParam) -> dict[str, Any]:
    """The state of a folded parameter, with which it steps as its pieces would have:
    every per-element tensor (momentum, Adam's moments and amsgrad's maximum) assembled
    from the pieces' as they are (zeros for a piece without state: it never stepped).
    Under Adam or AdamW, the oldest piece's step count and each younger slice's lag
    behind it, which :func:`correct_young_slices` steps at its own age
    (:mod:`esper_core.env.adam_ages` says why one count cannot serve pieces of different
    ages). Any other entry (another optimizer's step count) from the first piece that
    has it, the old parameter. Empty when no piece has state."""
    states = [old.state.get(p, {}) for p in fold.pieces]
    if not any(states):
        return {}
    adam = is_adam(old) and any("step" in s for s in states)
    keys = [k for s in states for k in s if k != LAG_KEY and not (adam and k == "step")]
    out: dict[str, Any] = assembled_step(states, fold) if adam else {}
    for key in dict.fromkeys(keys):
        values = [s.get(key) for s in states]
        per_element = [
            isinstance(v, torch.Tensor) and v.shape == p.shape for v, p in zip(values, fold.pieces)
        ]
        if any(per_element):
            parts = [
                v if isinstance(v, torch.Tensor) and ok else torch.zeros_like(p)
                for v, p, ok in zip(values, fold.pieces, per_element)
            ]
            out[key] = fold.assemble(parts).clone()
        else:
            out[key] = next(v for v in values if v is not None)
    return out
