"""``blueprints.cnn``: seed recipes for CNN hosts (activations ``[B, C, H, W]``).

Factories import torch when called, so loading this plugin does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from esper_core import hookimpl
from esper_core.components.blueprint import Blueprint

if TYPE_CHECKING:
    from torch import nn


def _hidden(c: int) -> int:
    return max(4, c // 4)  # mirrors cnn_modules.hidden_width


def noop(channels: int) -> nn.Module:
    from torch import nn

    return nn.Identity()


def norm(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import NormSeed

    return NormSeed(channels)


def attention(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import SqueezeExcite

    return SqueezeExcite(channels)


def depthwise(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import DepthwiseSeed

    return DepthwiseSeed(channels)


def bottleneck(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import BottleneckSeed

    return BottleneckSeed(channels)


def conv_small(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import ConvSmallSeed

    return ConvSmallSeed(channels)


def conv_light(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import ConvLightSeed

    return ConvLightSeed(channels)


def conv_heavy(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import conv_heavy as build

    return build(channels)


def conv_layer(channels: int) -> nn.Module:
    from esper_blueprints.cnn_modules import ConvLayer

    return ConvLayer(channels)


def widen(channels: int, next_channels: int, next_stride: int) -> nn.Module:
    from esper_blueprints.cnn_modules import WidenBranch

    return WidenBranch(channels, next_channels, next_channels, next_stride)


def widen4x(channels: int, next_channels: int, next_stride: int) -> nn.Module:
    from esper_blueprints.cnn_modules import WidenBranch

    return WidenBranch(channels, 3 * next_channels, next_channels, next_stride)


def _branch_params(channels: int, width: int, out: int) -> int:
    """conv3x3 (no bias) + GroupNorm affine + conv1x1 with bias."""
    return 9 * channels * width + 2 * width + width * out + out


BLUEPRINTS = (
    Blueprint(
        name="noop",
        topology="cnn",
        factory=noop,
        param_estimate=lambda c: 0,
        description="identity; the no-growth control",
        identity_at_birth=True,
    ),
    Blueprint(
        name="norm",
        topology="cnn",
        factory=norm,
        param_estimate=lambda c: 2 * c,
        description="x + GroupNorm(x), norm scale initialised to zero",
        identity_at_birth=True,
    ),
    Blueprint(
        name="attention",
        topology="cnn",
        factory=attention,
        param_estimate=lambda c: 2 * c * _hidden(c) + _hidden(c) + c,
        description="squeeze-and-excite channel gating x * sigmoid(mlp(mean_hw(x)))",
        identity_at_birth=False,
    ),
    Blueprint(
        name="depthwise",
        topology="cnn",
        factory=depthwise,
        param_estimate=lambda c: 9 * c + c * c + 2 * c,
        description="x + relu(GN(pointwise(depthwise 3x3(x)))): cheap spatial mixing",
        identity_at_birth=False,
    ),
    Blueprint(
        name="bottleneck",
        topology="cnn",
        factory=bottleneck,
        param_estimate=lambda c: 2 * c * _hidden(c) + 9 * _hidden(c) ** 2 + 4 * _hidden(c) + c,
        description="x + 1x1 up(3x3(1x1 down(x))) at C/4 width, up-projection zero-initialised",
        identity_at_birth=True,
    ),
    Blueprint(
        name="conv_small",
        topology="cnn",
        factory=conv_small,
        param_estimate=lambda c: c * c + c,
        description="x + conv1x1(x), zero-initialised: a learned channel mix",
        identity_at_birth=True,
    ),
    Blueprint(
        name="conv_light",
        topology="cnn",
        factory=conv_light,
        param_estimate=lambda c: 9 * c * c + 2 * c,
        description="x + relu(GN(conv3x3(x))): one residual conv layer",
        identity_at_birth=False,
    ),
    Blueprint(
        name="conv_heavy",
        topology="cnn",
        factory=conv_heavy,
        param_estimate=lambda c: 2 * (9 * c * c + 2 * c),
        description="two conv_light layers in sequence",
        identity_at_birth=False,
    ),
    Blueprint(
        name="conv_layer",
        topology="cnn",
        factory=conv_layer,
        param_estimate=lambda c: 9 * c * c + 2 * c,
        description=(
            "relu(BN(conv3x3(x))), not residual: one more host layer, entering through the "
            "blend (the identity at alpha 0); its static twin is convs_after_pool = 1"
        ),
        identity_at_birth=False,
        opt_in=True,
    ),
    Blueprint(
        name="widen",
        topology="cnn",
        factory=widen,
        param_estimate=lambda c, n, s: _branch_params(c, n, n),
        description=(
            "a parallel branch of the following block, as wide as it (doubles its width): "
            "conv1x1(pool(relu(GN(conv3x3(x))))) added to its output, 1x1 zero-initialised"
        ),
        identity_at_birth=True,
        branch=True,
        opt_in=True,
    ),
    Blueprint(
        name="widen4x",
        topology="cnn",
        factory=widen4x,
        param_estimate=lambda c, n, s: _branch_params(c, 3 * n, n),
        description="widen with a branch 3x the following block's width (the block 4x as wide)",
        identity_at_birth=True,
        branch=True,
        opt_in=True,
    ),
)


@hookimpl
def esper_register_blueprints(register: Any) -> None:
    for blueprint in BLUEPRINTS:
        register(blueprint)
