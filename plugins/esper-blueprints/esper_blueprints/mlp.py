"""``blueprints.mlp``: seed recipes for MLP hosts (activations ``[B, C]``: an MLP's hidden
layers, a tabular model, a classifier head's input).

The seeds are residual, ``x + f(x)``, with their last layer zero-initialised so each is
the identity at birth, and normalise with LayerNorm, never BatchNorm (a seed must not
depend on the other samples of its batch). The modules are the transformer seeds'
(:mod:`esper_blueprints.transformer_modules`): they act on the last dimension, which for
``[B, C]`` is every feature. Factories import torch when called, so loading this plugin
does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from esper_core import hookimpl
from esper_core.components.blueprint import Blueprint

if TYPE_CHECKING:
    from torch import nn

LOWRANK_RANK = 8


def noop(channels: int) -> nn.Module:
    from torch import nn

    return nn.Identity()


def norm(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import NormSeed

    return NormSeed(channels)


def lowrank(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import LoRASeed

    return LoRASeed(channels, LOWRANK_RANK)


def residual(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import MLPSeed

    return MLPSeed(channels, expansion=2, zero_init=True)


def residual_wide(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import MLPSeed

    return MLPSeed(channels, expansion=4, zero_init=True)


BLUEPRINTS = (
    Blueprint(
        name="noop",
        topology="mlp",
        factory=noop,
        param_estimate=lambda c: 0,
        description="identity; the no-growth control",
        identity_at_birth=True,
    ),
    Blueprint(
        name="norm",
        topology="mlp",
        factory=norm,
        param_estimate=lambda c: 2 * c,
        description="x + LayerNorm(x), norm scale initialised to zero",
        identity_at_birth=True,
    ),
    Blueprint(
        name="lowrank",
        topology="mlp",
        factory=lowrank,
        param_estimate=lambda c: 2 * LOWRANK_RANK * c,
        description=f"x + up(down(x)), rank {LOWRANK_RANK}, up-projection zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="residual",
        topology="mlp",
        factory=residual,
        param_estimate=lambda c: 4 * c * c + 5 * c,
        description="x + W2 gelu(W1 LayerNorm(x)), hidden 2x, W2 zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="residual_wide",
        topology="mlp",
        factory=residual_wide,
        param_estimate=lambda c: 8 * c * c + 7 * c,
        description="x + W2 gelu(W1 LayerNorm(x)), hidden 4x, W2 zero-initialised",
        identity_at_birth=True,
    ),
)


@hookimpl
def esper_register_blueprints(register: Any) -> None:
    for blueprint in BLUEPRINTS:
        register(blueprint)
