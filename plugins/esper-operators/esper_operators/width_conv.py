"""Masked width growth of conv stages (MSG, Yao et al. 2024): the torch modules.

A conv stage is an ``nn.Sequential`` of ``Conv2d`` layers, each optionally followed by a
``BatchNorm2d``, and channel-wise modules without parameters (activations, pooling).
Widening it from ``C`` to ``C + D`` output channels wraps it in a
:class:`MaskedConvStage`: the stage's own modules compute the ``C`` old channels exactly
as before, and new parameters compute the ``D`` new ones, which are multiplied by a mask
``m`` after every layer. The layer that reads the stage's output (the next stage's first
conv, or the linear head after a global pool) gains ``D`` input channels the same way.

At ``m = 0`` the new channels are exactly zero, so every old channel and the output are
bit for bit what the stage computed before (a product with zero adds exact zeros); the
old parameters keep their identity, so their optimizer state carries over. At ``m = 1``
:meth:`MaskedConvStage.fold` returns plain modules of the new width (the mask folded
away); :meth:`MaskedConvStage.unwrap` returns the original stage (pruning).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.width_fold import (
    FoldedParam,
    cat0,
    cat1,
    conv_assembler,
    fold_norm,
    set_assembled,
)
from esper_core.lifecycle.width_parts import CHANNELWISE, CROSS_INITS, check_extra, uniform_init


def stage_out_channels(stage: nn.Module) -> int:
    """The output channels of a conv stage (plain or masked)."""
    if isinstance(stage, MaskedConvStage):
        return stage.out_channels
    convs = [m for m in stage.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        raise WidthError(f"{type(stage).__name__} has no Conv2d: not a conv stage")
    return int(convs[-1].out_channels)


def _layers(stage: nn.Sequential) -> list[tuple[int, int | None, list[int]]]:
    """The stage's layers as (conv index, norm index or None, indices of the channel-wise
    modules that follow, up to the next conv: a trailing pool belongs to the last layer)."""
    layers: list[tuple[int, int | None, list[int]]] = []
    for i, module in enumerate(stage):
        if isinstance(module, nn.Conv2d):
            if module.groups != 1 or module.padding_mode != "zeros":
                raise WidthError(
                    f"conv {i} of the stage has groups={module.groups}, padding_mode="
                    f"{module.padding_mode!r}; width growth supports groups=1 and zero padding"
                )
            layers.append((i, None, []))
        elif isinstance(module, nn.BatchNorm2d):
            if not layers or layers[-1][1] is not None or layers[-1][2]:
                raise WidthError(f"BatchNorm2d {i} of the stage does not follow a conv directly")
            conv, _, after = layers[-1]
            layers[-1] = (conv, i, after)
        elif isinstance(module, CHANNELWISE):
            if not layers:
                raise WidthError(
                    f"module {i} of the stage ({type(module).__name__}) precedes its first conv"
                )
            layers[-1][2].append(i)
        else:
            raise WidthError(
                f"module {i} of the stage is a {type(module).__name__}; width growth supports "
                "Conv2d, BatchNorm2d and channel-wise modules without parameters"
            )
    if not layers:
        raise WidthError("the stage has no Conv2d to widen")
    return layers


class MaskedConvStage(nn.Module):
    """A conv stage with ``in_extra`` new input channels (its predecessor was widened) and
    ``out_extra`` new output channels, both behind :attr:`mask`.

    ``base`` keeps the original stage (its parameters, unchanged, compute the old channels);
    the new parameters are ``out_weight`` (new outputs from every input), ``cross_weight``
    (old outputs from new inputs), ``out_bias`` and ``norms`` (one BatchNorm2d per normed
    layer, for the new channels). ``cross_init``: how ``cross_weight`` starts, ``random``
    (MSG: any init, the mask preserves the function) or ``zero``.
    """

    def __init__(
        self,
        base: nn.Sequential,
        in_extra: int,
        out_extra: int,
        generator: torch.Generator | None = None,
        cross_init: str = "random",
    ) -> None:
        super().__init__()
        self.mask: torch.Tensor
        check_extra("stage", in_extra, out_extra, cross_init)
        self.base = base
        self.in_extra, self.out_extra = in_extra, out_extra
        self._layers = _layers(base)
        self.in_channels = int(self._conv_at(0).in_channels)
        self.out_channels = stage_out_channels(base) + out_extra
        self.register_buffer("mask", torch.zeros(()))
        self.out_weight = nn.ParameterList()
        self.out_bias = nn.ParameterList()
        self.cross_weight = nn.ParameterList()
        self.norms = nn.ModuleList()
        self._cross_of: list[int | None] = []  # layer -> index in cross_weight
        self._bias_of: list[int | None] = []  # layer -> index in out_bias
        for k, (_, ni, _) in enumerate(self._layers):
            conv = self._conv_at(k)
            new_in = in_extra if k == 0 else out_extra
            taps = conv.kernel_size[0] * conv.kernel_size[1]
            fan_in = (conv.in_channels + new_in) * taps
            w = conv.weight
            if new_in:
                shape = (conv.out_channels, new_in, *conv.kernel_size)
                cross = uniform_init(shape, fan_in, w, generator)
                if cross_init == "zero":
                    cross.zero_()
                self._cross_of.append(len(self.cross_weight))
                self.cross_weight.append(nn.Parameter(cross))
            else:
                self._cross_of.append(None)
            if out_extra:
                shape = (out_extra, conv.in_channels + new_in, *conv.kernel_size)
                self.out_weight.append(nn.Parameter(uniform_init(shape, fan_in, w, generator)))
                if conv.bias is not None:
                    self._bias_of.append(len(self.out_bias))
                    self.out_bias.append(
                        nn.Parameter(uniform_init((out_extra,), fan_in, w, generator))
                    )
                else:
                    self._bias_of.append(None)
                if ni is not None:
                    bn = base[ni]
                    assert isinstance(bn, nn.BatchNorm2d)
                    norm = nn.BatchNorm2d(
                        out_extra, bn.eps, bn.momentum, bn.affine, bn.track_running_stats
                    )
                    self.norms.append(norm.to(device=w.device, dtype=w.dtype))

    # ------------------------------------------------------------ the forward pass

    def _conv_at(self, layer: int) -> nn.Conv2d:
        return cast(nn.Conv2d, self.base[self._layers[layer][0]])

    @staticmethod
    def _conv(
        conv: nn.Conv2d, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """``x`` through ``conv``'s geometry (stride, padding, dilation) with other weights."""
        return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation)

    def new_parameters(self) -> list[nn.Parameter]:
        """The parameters the growth added (the original stage's are not among them)."""
        return [*self.out_weight, *self.out_bias, *self.cross_weight, *self.norms.parameters()]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_extra:
            # Contiguous, as the unwidened stage's input was: a kernel may pick another
            # (differently rounding) path for a strided input.
            old = x[:, : self.in_channels].contiguous()
            new = x[:, self.in_channels :].contiguous()
        else:
            old, new = x, None
        normed = 0
        for k, (_, ni, after) in enumerate(self._layers):
            conv = self._conv_at(k)
            y_old = conv(old)
            cross = self._cross_of[k]
            if new is not None and cross is not None:
                y_old = y_old + self._conv(conv, new, self.cross_weight[cross], None)
            y_new: torch.Tensor | None = None
            if self.out_extra:
                inputs = old if new is None else torch.cat([old, new], dim=1)
                b = self._bias_of[k]
                bias = None if b is None else self.out_bias[b]
                y_new = self._conv(conv, inputs, self.out_weight[k], bias)
            if ni is not None:
                y_old = self.base[ni](y_old)
                if y_new is not None:
                    y_new = self.norms[normed](y_new)
                    normed += 1
            for i in after:
                y_old = self.base[i](y_old)
                if y_new is not None:
                    y_new = self.base[i](y_new)
            old = y_old
            new = None if y_new is None else y_new * self.mask.to(y_new.dtype)
        return old if new is None else torch.cat([old, new], dim=1)

    # ------------------------------------------------------------ fossilize / prune

    def unwrap(self) -> nn.Sequential:
        """The original stage: pruning the growth restores its function (the old
        parameters trained on meanwhile, exactly as the masked stage's at ``m = 0``)."""
        return self.base

    def fold(self) -> tuple[nn.Sequential, list[FoldedParam]]:
        """Plain modules of the new width computing this stage at ``m = 1`` (equal up to
        the order of float sums), and how each of their parameters was assembled."""
        if float(self.mask) != 1.0:
            raise WidthError(f"fold needs the mask at 1, it is {float(self.mask):g}")
        modules = list(self.base)
        folded: list[FoldedParam] = []
        normed = 0
        for k, (ci, ni, _) in enumerate(self._layers):
            conv = self._conv_at(k)
            new_in = self.in_extra if k == 0 else self.out_extra
            cross = self._cross_of[k]
            if cross is None and not self.out_extra:
                continue  # this conv does not change: it stays, its parameters' state with it
            # torch types the geometry as tuple[int, ...]; Conv2d's own values fit Conv2d.
            geometry: dict[str, Any] = {
                "kernel_size": conv.kernel_size,
                "stride": conv.stride,
                "padding": conv.padding,
                "dilation": conv.dilation,
            }
            wide = nn.Conv2d(
                conv.in_channels + new_in,
                conv.out_channels + self.out_extra,
                bias=conv.bias is not None,
                **geometry,
            ).to(device=conv.weight.device, dtype=conv.weight.dtype)
            w_pieces = [conv.weight]
            if cross is not None:
                w_pieces.append(self.cross_weight[cross])
            if self.out_extra:
                w_pieces.append(self.out_weight[k])
            folded.append(
                set_assembled(
                    wide,
                    "weight",
                    tuple(w_pieces),
                    conv_assembler(cross is not None, bool(self.out_extra)),
                )
            )
            b = self._bias_of[k] if self.out_extra else None
            if conv.bias is not None and b is not None:
                folded.append(set_assembled(wide, "bias", (conv.bias, self.out_bias[b]), cat0))
            elif conv.bias is not None:
                wide.bias = conv.bias  # no new outputs: the same bias, its state with it
            modules[ci] = wide
            if ni is not None and self.out_extra:
                bn = self.base[ni]
                assert isinstance(bn, nn.BatchNorm2d)
                norm = self.norms[normed]
                assert isinstance(norm, nn.BatchNorm2d)
                normed += 1
                modules[ni] = fold_norm(bn, norm, folded)
        # New modules start in training mode: take the stage's, as a swap must not flip it.
        return nn.Sequential(*modules).train(self.training), folded


class MaskedLinearInput(nn.Module):
    """A linear layer with ``in_extra`` new (masked upstream) input features: the head
    after a widened last stage's global pool. ``cross_weight`` maps them to the outputs."""

    def __init__(
        self,
        base: nn.Linear,
        in_extra: int,
        generator: torch.Generator | None = None,
        cross_init: str = "random",
    ) -> None:
        super().__init__()
        if in_extra < 1:
            raise WidthError(f"a masked linear input needs new features, got {in_extra}")
        if cross_init not in CROSS_INITS:
            raise WidthError(f"cross_init {cross_init!r}: expected one of {', '.join(CROSS_INITS)}")
        self.base = base
        self.in_features = int(base.in_features)
        self.in_extra = in_extra
        fan_in = base.in_features + in_extra
        cross = uniform_init((base.out_features, in_extra), fan_in, base.weight, generator)
        if cross_init == "zero":
            cross.zero_()
        self.cross_weight = nn.Parameter(cross)

    def new_parameters(self) -> list[nn.Parameter]:
        return [self.cross_weight]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Contiguous: a matrix product rounds differently on a strided input (seen on CPU).
        out: torch.Tensor = self.base(x[:, : self.in_features].contiguous())
        return out + F.linear(x[:, self.in_features :], self.cross_weight)

    def unwrap(self) -> nn.Linear:
        return self.base

    def fold(self) -> tuple[nn.Linear, list[FoldedParam]]:
        base = self.base
        wide = nn.Linear(
            self.in_features + self.in_extra, base.out_features, bias=base.bias is not None
        )
        wide = wide.to(device=base.weight.device, dtype=base.weight.dtype)
        folded = [set_assembled(wide, "weight", (base.weight, self.cross_weight), cat1)]
        if base.bias is not None:
            wide.bias = base.bias  # unchanged: the same parameter, its optimizer state with it
        return wide.train(self.training), folded
