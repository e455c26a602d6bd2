"""The torch side of a training recipe (:mod:`esper_core.recipe`): weight decay by
parameter kind, the recipe's optimizer, the learning rate of a step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from esper_core.recipe import Recipe


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
        return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, fused=fused or None)
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
