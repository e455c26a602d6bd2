"""Width growth of a user's layer pairs (:mod:`~esper_core.grow.layer_pairs`), masked.

Widening a pair by ``D`` channels gives its producer ``D`` new outputs (new rows of its
weight), each norm between ``D`` new channels, and its consumer ``D x spread`` new inputs
(new columns), which the consumer multiplies by the growth's mask before adding them in.
At mask 0 the consumer adds exact zeros, so the model computes bit for bit what it did;
the producer's old outputs and everything the new channels pass through are unchanged
(they act on each channel alone). The old parameters keep their identity (their
optimizer state carries over). At mask 1 :meth:`MaskedLayer.fold` gives plain layers of
the new width; pruning puts the original modules back, by name, in the user's module.

Where two pairs share a layer (an MLP's middle layer reads one pair and produces the
next), that layer gains new inputs and new outputs in one :class:`MaskedLayer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from esper_core.components.host import InjectionSpec
from esper_core.grow.layer_pairs import LayerPair
from esper_core.lifecycle.module_swap import ModuleSwap, put
from esper_core.lifecycle.width import WidthError, check_extra, uniform_init
from esper_core.lifecycle.width_fold import (
    FoldedParam,
    cat0,
    conv_assembler,
    fold_norm,
    set_assembled,
)

Norm = nn.BatchNorm1d | nn.BatchNorm2d


class MaskedLayer(nn.Module):
    """A ``Linear`` or ``Conv2d`` with ``in_extra`` new inputs (behind :attr:`mask`) and
    ``out_extra`` new outputs. ``base`` keeps the original layer and computes the old
    outputs from the old inputs; ``cross_weight`` adds the new inputs' part, times the
    mask; ``out_weight``/``out_bias`` compute the new outputs from every input."""

    def __init__(
        self,
        base: nn.Linear | nn.Conv2d,
        in_extra: int,
        out_extra: int,
        generator: torch.Generator | None = None,
        cross_init: str = "random",
    ) -> None:
        super().__init__()
        check_extra("layer", in_extra, out_extra, cross_init)
        self.mask: torch.Tensor
        self.base = base
        self.in_extra, self.out_extra = in_extra, out_extra
        self.conv = isinstance(base, nn.Conv2d)
        self.dim = 1 if self.conv else -1  # where the features are
        w = base.weight
        self.in_old = int(w.shape[1])
        kernel = tuple(w.shape[2:])
        fan_in = (self.in_old + in_extra) * (int(w[0, 0].numel()) if self.conv else 1)
        self.register_buffer("mask", torch.zeros((), device=w.device, dtype=w.dtype))
        self.cross_weight: nn.Parameter | None = None
        self.out_weight: nn.Parameter | None = None
        self.out_bias: nn.Parameter | None = None
        if in_extra:
            cross = uniform_init((int(w.shape[0]), in_extra, *kernel), fan_in, w, generator)
            self.cross_weight = nn.Parameter(cross.zero_() if cross_init == "zero" else cross)
        if out_extra:
            shape = (out_extra, self.in_old + in_extra, *kernel)
            self.out_weight = nn.Parameter(uniform_init(shape, fan_in, w, generator))
            if base.bias is not None:
                self.out_bias = nn.Parameter(uniform_init((out_extra,), fan_in, w, generator))

    def _op(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        base = self.base
        if isinstance(base, nn.Conv2d):
            return F.conv2d(x, weight, bias, base.stride, base.padding, base.dilation)
        return F.linear(x, weight, bias)

    def new_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.cross_weight, self.out_weight, self.out_bias) if p is not None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_extra:
            # Contiguous, as the layer's input was before: a kernel may take another
            # (differently rounding) path for a strided input.
            old = x.narrow(self.dim, 0, self.in_old).contiguous()
            new = x.narrow(self.dim, self.in_old, self.in_extra).contiguous()
            assert self.cross_weight is not None
            y = self.base(old) + self._op(new, self.cross_weight, None) * self.mask
        else:
            y = self.base(x)
        if self.out_weight is None:
            return cast(torch.Tensor, y)
        return torch.cat([y, self._op(x, self.out_weight, self.out_bias)], dim=self.dim)

    def unwrap(self) -> nn.Module:
        return self.base

    def fold(self) -> tuple[nn.Module, list[FoldedParam]]:
        """A plain layer of the new width computing this one at mask 1, and how each of
        its new parameters was assembled."""
        if self.in_extra and float(self.mask) != 1.0:
            raise WidthError(f"fold needs the mask at 1, it is {float(self.mask):g}")
        base = self.base
        ins, outs = self.in_old + self.in_extra, int(base.weight.shape[0]) + self.out_extra
        wide: nn.Linear | nn.Conv2d
        if isinstance(base, nn.Conv2d):
            geometry: dict[str, Any] = {
                "kernel_size": base.kernel_size,
                "stride": base.stride,
                "padding": base.padding,
                "dilation": base.dilation,
            }
            wide = nn.Conv2d(ins, outs, bias=base.bias is not None, **geometry)
        else:
            wide = nn.Linear(ins, outs, bias=base.bias is not None)
        wide = wide.to(device=base.weight.device, dtype=base.weight.dtype)
        pieces = tuple(
            p for p in (base.weight, self.cross_weight, self.out_weight) if p is not None
        )
        assemble = conv_assembler(self.cross_weight is not None, self.out_weight is not None)
        folded = [set_assembled(wide, "weight", pieces, assemble)]
        if base.bias is not None and self.out_bias is not None:
            folded.append(set_assembled(wide, "bias", (base.bias, self.out_bias), cat0))
        elif base.bias is not None:
            wide.bias = base.bias  # no new outputs: the same bias, its state with it
        return wide.train(self.training), folded


class WidenedNorm(nn.Module):
    """A BatchNorm over the old channels (``base``, unchanged) and ``extra`` new ones."""

    def __init__(self, base: Norm, extra: int) -> None:
        super().__init__()
        self.base = base
        self.width = int(base.num_features)
        like = next(iter([*base.parameters(), *base.buffers()]))
        norm = type(base)(extra, base.eps, base.momentum, base.affine, base.track_running_stats)
        self.extra = norm.to(device=like.device)

    def new_parameters(self) -> list[nn.Parameter]:
        return list(self.extra.parameters())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        old = x[:, : self.width].contiguous()
        new = x[:, self.width :].contiguous()
        return torch.cat([self.base(old), self.extra(new)], dim=1)

    def unwrap(self) -> nn.Module:
        return self.base

    def fold(self) -> tuple[nn.Module, list[FoldedParam]]:
        folded: list[FoldedParam] = []
        wide: nn.Module
        if isinstance(self.base, nn.BatchNorm1d):
            wide = fold_norm(self.base, cast(nn.BatchNorm1d, self.extra), folded)
        else:
            wide = fold_norm(self.base, cast(nn.BatchNorm2d, self.extra), folded)
        return wide.train(self.training), folded


class LayerWidening(ModuleSwap[str]):
    """The width growth of ``pairs`` of ``root`` from ``old`` to ``new`` widths (one per
    pair): a :class:`~esper_core.lifecycle.host_growth.HostOperation`. ``swapped`` runs
    after every exchange of modules (the host puts its slot hooks back on them);
    ``slot_id``: the slot id of a module's name."""

    def __init__(
        self,
        root: nn.Module,
        pairs: Sequence[LayerPair],
        old: Sequence[int],
        new: Sequence[int],
        generator: torch.Generator | None,
        cross_init: str,
        swapped: Callable[[], None] = lambda: None,
        slot_id: Callable[[str], str] = str,
    ) -> None:
        super().__init__()
        self.root, self.swapped = root, swapped
        extra = [n - o for n, o in zip(new, old)]
        ins: dict[str, int] = {}
        outs: dict[str, int] = {}
        touched: set[str] = set()
        norms: dict[str, int] = {}
        for pair, more in zip(pairs, extra):
            if more <= 0:
                continue
            outs[pair.producer] = more
            ins[pair.consumer] = more * pair.spread
            norms.update(dict.fromkeys(pair.norms, more))
            touched.update(name for name, _ in pair.inside)
        for name in dict.fromkeys([*outs, *ins]):
            layer = root.get_submodule(name)
            if not isinstance(layer, (nn.Linear, nn.Conv2d)):
                raise WidthError(f"{name} is a {type(layer).__name__} now; it was a layer pair's")
            self._masked[name] = MaskedLayer(
                layer, ins.get(name, 0), outs.get(name, 0), generator, cross_init
            )
        for name, more in norms.items():
            self._masked[name] = WidenedNorm(cast(Norm, root.get_submodule(name)), more)
        # A slot on a module whose output carries a widened pair's channels changes width
        # (asked for every slot at every epoch's masks: computed once).
        self._touched = frozenset(slot_id(name) for name in touched)

    def _put(self, key: str, module: nn.Module) -> nn.Module:
        return put(self.root, key, module)

    def _swapped(self) -> None:
        self.swapped()

    def touches(self, spec: InjectionSpec) -> bool:
        return spec.slot_id in self._touched
