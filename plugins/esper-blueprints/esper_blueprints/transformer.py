"""``blueprints.transformer``: seed recipes for transformer hosts (activations ``[B, T, C]``).

Factories import torch when called, so loading this plugin does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from esper_core import hookimpl
from esper_core.components.blueprint import Blueprint

if TYPE_CHECKING:
    from torch import nn

LORA_RANK = 8
LORA_LARGE_RANK = 32


def noop(channels: int) -> nn.Module:
    from torch import nn

    return nn.Identity()


def norm(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import NormSeed

    return NormSeed(channels)


def lora(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import LoRASeed

    return LoRASeed(channels, LORA_RANK)


def lora_large(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import LoRASeed

    return LoRASeed(channels, LORA_LARGE_RANK)


def attention(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import AttentionSeed

    return AttentionSeed(channels)


def mlp_small(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import MLPSeed

    return MLPSeed(channels, expansion=2, zero_init=False)


def mlp(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import MLPSeed

    return MLPSeed(channels, expansion=4, zero_init=True)


def block(channels: int) -> nn.Module:
    from esper_blueprints.transformer_modules import BlockSeed

    return BlockSeed(channels)


def inherit_block(seed: nn.Module, block: nn.Module) -> None:
    from esper_blueprints.transformer_modules import BlockSeed

    if not isinstance(seed, BlockSeed):
        raise TypeError(f"expected a transformer/block seed, got {type(seed).__name__}")
    seed.inherit(block)


BLUEPRINTS = (
    Blueprint(
        name="noop",
        topology="transformer",
        factory=noop,
        param_estimate=lambda c: 0,
        description="identity; the no-growth control",
        identity_at_birth=True,
    ),
    Blueprint(
        name="norm",
        topology="transformer",
        factory=norm,
        param_estimate=lambda c: 2 * c,
        description="x + LayerNorm(x), norm scale initialised to zero",
        identity_at_birth=True,
    ),
    Blueprint(
        name="lora",
        topology="transformer",
        factory=lora,
        param_estimate=lambda c: 2 * LORA_RANK * c,
        description=f"x + up(down(x)), rank {LORA_RANK}, up-projection zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="lora_large",
        topology="transformer",
        factory=lora_large,
        param_estimate=lambda c: 2 * LORA_LARGE_RANK * c,
        description=f"x + up(down(x)), rank {LORA_LARGE_RANK}, up-projection zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="attention",
        topology="transformer",
        factory=attention,
        param_estimate=lambda c: 4 * c * c + 6 * c,
        description="x + causal self-attention(LN(x)), output projection zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="mlp_small",
        topology="transformer",
        factory=mlp_small,
        param_estimate=lambda c: 4 * c * c + 5 * c,
        description="x + MLP(LN(x)) with a 2x hidden layer",
        identity_at_birth=False,
    ),
    Blueprint(
        name="mlp",
        topology="transformer",
        factory=mlp,
        param_estimate=lambda c: 8 * c * c + 7 * c,
        description="x + MLP(LN(x)) with a 4x hidden layer, fc2 zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="block",
        topology="transformer",
        factory=block,
        param_estimate=lambda c: 12 * c * c + 13 * c,
        description="a whole pre-norm attention + 4x MLP block, output projections zero-initialised",
        identity_at_birth=True,
        inherit=inherit_block,
    ),
)


@hookimpl
def esper_register_blueprints(register: Any) -> None:
    for blueprint in BLUEPRINTS:
        register(blueprint)
