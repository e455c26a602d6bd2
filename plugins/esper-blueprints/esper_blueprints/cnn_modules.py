"""Seed modules for CNN hosts: ``[B, C, H, W] -> [B, C, H, W]`` at any H, W.

Every module returns the full activation (residual form), because the slot blends
``lerp(h, seed(h), alpha)``; a branch module (:class:`WidenBranch`) instead returns the
increment it adds to the following host block's output. The residual seeds normalise with
GroupNorm, which behaves the same in training and evaluation. :class:`ConvLayer` is the
exception: it is the host's own layer (conv+BatchNorm+ReLU, not residual), for growth in
depth whose grown host equals a static one; its BatchNorm is in eval mode whenever
validation repeats a batch with per-sample alphas, so it never mixes samples there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def num_groups(channels: int, max_groups: int = 8, min_per_group: int = 4) -> int:
    """Most groups (at most ``max_groups``) dividing ``channels`` with enough channels each.

    Groups of one channel would normalise a 1x1 map to a constant, so a group keeps at
    least ``min_per_group`` channels when the layer has that many.
    """
    need = min(min_per_group, channels)
    for groups in range(min(max_groups, channels), 0, -1):
        if channels % groups == 0 and channels // groups >= need:
            return groups
    return 1


def zero_(*tensors: torch.Tensor | None) -> None:
    """Initialise weights (and optional biases) to zero."""
    for t in tensors:
        if t is not None:
            nn.init.zeros_(t)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups(channels), channels)


def hidden_width(channels: int, divisor: int = 4, minimum: int = 4) -> int:
    """Width of a bottleneck: ``channels / divisor``, but not below ``minimum``."""
    return max(minimum, channels // divisor)


class NormSeed(nn.Module):
    """``x + GroupNorm(x)`` with the norm's affine scale and shift initialised to zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = group_norm(channels)
        zero_(self.norm.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(x)


class SqueezeExcite(nn.Module):
    """Channel attention: ``x * sigmoid(fc2(relu(fc1(mean_hw(x)))))``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        hidden = hidden_width(channels)
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.fc2 = nn.Conv2d(hidden, channels, 1)
        # With a handful of hidden units, random negative biases can kill every ReLU.
        zero_(self.fc1.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.fc2(F.relu(self.fc1(x.mean(dim=(2, 3), keepdim=True))))
        return x * torch.sigmoid(gate)


class DepthwiseSeed(nn.Module):
    """``x + relu(GN(pointwise(depthwise3x3(x))))``: spatial mixing at C(9 + C) weights."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.norm = group_norm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.norm(self.pointwise(self.depthwise(x))))


class BottleneckSeed(nn.Module):
    """``x + up(relu(GN(conv3x3(relu(GN(down(x)))))))`` with ``up`` initialised to zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        hidden = hidden_width(channels)
        self.down = nn.Conv2d(channels, hidden, 1, bias=False)
        self.norm1 = group_norm(hidden)
        self.conv = nn.Conv2d(hidden, hidden, 3, padding=1, bias=False)
        self.norm2 = group_norm(hidden)
        self.up = nn.Conv2d(hidden, channels, 1)
        zero_(self.up.weight, self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.norm1(self.down(x)))
        h = F.relu(self.norm2(self.conv(h)))
        return x + self.up(h)


class ConvSmallSeed(nn.Module):
    """``x + conv1x1(x)`` with the 1x1 convolution initialised to zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        zero_(self.conv.weight, self.conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x)


class ConvLightSeed(nn.Module):
    """``x + relu(GN(conv3x3(x)))``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = group_norm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.norm(self.conv(x)))


class ConvLayer(nn.Module):
    """``relu(BN(conv3x3(x)))``: a layer of the CNN host's own kind, with torch's default
    initialisation as the host's layers have. Not residual: the slot's blend
    ``lerp(h, layer(h), alpha)`` is the identity at alpha 0 and this layer at alpha 1, so a
    fossilized ``conv_layer`` leaves the same network as a host built with one more layer
    there (``convs_after_pool``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.norm(self.conv(x)))


class WidenBranch(nn.Module):
    """A parallel branch of the following host block, ``width`` channels wide:
    ``conv1x1_{width -> out}(maxpool_stride(relu(GN(conv3x3_{in -> width}(x)))))``.

    Its output is the increment added to that block's (pooled) output, not a whole
    activation; the 1x1 projection is zero-initialised, so the increment is 0 at birth.
    """

    def __init__(self, channels: int, width: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, width, 3, padding=1, bias=False)
        self.norm = group_norm(width)
        self.pool = nn.MaxPool2d(stride) if stride > 1 else nn.Identity()
        self.project = nn.Conv2d(width, out_channels, 1)
        zero_(self.project.weight, self.project.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.pool(F.relu(self.norm(self.conv(x)))))


def conv_heavy(channels: int) -> nn.Module:
    """Two :class:`ConvLightSeed` in sequence."""
    return nn.Sequential(ConvLightSeed(channels), ConvLightSeed(channels))
