"""Width growth of a user's layer pairs (:mod:`~esper_core.grow.layer_pairs`), masked.

Widening a pair by ``D`` channels gives its producer ``D`` new outputs (new rows of its
weight), each norm between ``D`` new channels, and its consumer ``D x spread`` new inputs
(new columns), which the consumer multiplies by the growth's mask before adding them in.
At mask 0 the consumer adds exact zeros, so the model computes bit for bit what it did;
the producer's old outputs and everything the new channels pass through are unchanged
(they act on each channel alone). The old parameters keep their identity (their
optimizer state carries over). The user's modules never leave their places: the growth
rides on them through hooks, so a layer's own forward hooks and pre-hooks see its whole
output and input, and at mask 1 :meth:`MaskedLayer.fold` widens the very same objects
(their class, attributes and hooks kept); pruning takes the hooks off again. A subclass
whose forward is its own cannot be widened this way; the pair walk refuses it
(:mod:`~esper_core.grow.layer_pairs`).

Where two pairs share a layer (an MLP's middle layer reads one pair and produces the
next), that layer gains new inputs and new outputs in one :class:`MaskedLayer`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from esper_core.components.host import InjectionSpec
from esper_core.grow.layer_pairs import LayerPair
from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.width_fold import (
    FoldedParam,
    cat0,
    conv_assembler,
    fold_norm,
    set_assembled,
)
from esper_core.lifecycle.width_parts import check_extra, uniform_init

Norm = nn.BatchNorm1d | nn.BatchNorm2d
# The submodule of a user's layer that holds a growth's new parameters while it ramps.
ON_LAYER = "esper_widening"


class _OnLayer(nn.Module, ABC):
    """A growth's part that rides on one of the user's modules (``base``) without taking
    its place: registered on it as the submodule :data:`ON_LAYER` (so the user's
    ``parameters()``, ``state_dict()`` and ``to()`` hold it), with a forward pre-hook that
    hands ``base``'s own forward the old channels of its input and a forward hook,
    registered first, that adds the new channels to its output. The user's module object,
    its class, its attributes and its own hooks stay where they were: the user's
    pre-hooks see the whole input, the user's forward hooks the whole output, as they do
    on the plain layer of the new width that :meth:`fold` makes of ``base`` in place."""

    base: nn.Module

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        # Not a submodule: ``base`` holds this one (a copy or a pickle keeps the cycle).
        object.__setattr__(self, "base", base)
        self._input: torch.Tensor | None = None
        self._handles: list[Any] = []

    def attach(self) -> None:
        self.train(self.base.training)  # a fresh BatchNorm for new channels included
        self.base.add_module(ON_LAYER, self)
        self._handles = [
            self.base.register_forward_pre_hook(self._before),
            self.base.register_forward_hook(self._after, prepend=True),
        ]

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self._input = [], None
        if getattr(self.base, ON_LAYER, None) is self:
            delattr(self.base, ON_LAYER)

    def _old_input(self, x: torch.Tensor) -> torch.Tensor | None:
        """What ``base``'s own forward reads of the whole input; None: all of it."""
        return None

    def _before(self, module: nn.Module, args: Any) -> Any:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor):
            return None
        self._input = x
        old = self._old_input(x)
        return None if old is None else (old, *args[1:])

    def _after(self, module: nn.Module, args: Any, output: Any) -> Any:
        x, self._input = self._input, None
        assert x is not None and isinstance(output, torch.Tensor)
        return self._widen(x, output)

    @abstractmethod
    def _widen(self, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """The layer's output with the growth's part added (the producer's new channels
        or the consumer's new inputs)."""


class MaskedLayer(_OnLayer):
    """A ``Linear`` or ``Conv2d`` with ``in_extra`` new inputs (behind :attr:`mask`) and
    ``out_extra`` new outputs. ``base``, the user's layer, computes the old outputs from
    the old inputs with its own forward; ``cross_weight`` adds the new inputs' part, times
    the mask; ``out_weight``/``out_bias`` compute the new outputs from every input."""

    def __init__(
        self,
        base: nn.Linear | nn.Conv2d,
        in_extra: int,
        out_extra: int,
        generator: torch.Generator | None = None,
        cross_init: str = "random",
    ) -> None:
        super().__init__(base)
        check_extra("layer", in_extra, out_extra, cross_init)
        self.mask: torch.Tensor
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
        for p in self.new_parameters():  # a layer the user froze grows frozen
            p.requires_grad_(w.requires_grad)

    def _op(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        base = self.base
        if isinstance(base, nn.Conv2d):
            return F.conv2d(x, weight, bias, base.stride, base.padding, base.dilation)
        return F.linear(x, weight, bias)

    def new_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.cross_weight, self.out_weight, self.out_bias) if p is not None]

    def _old_input(self, x: torch.Tensor) -> torch.Tensor | None:
        # Contiguous, as the layer's input was before: a kernel may take another
        # (differently rounding) path for a strided input.
        return x.narrow(self.dim, 0, self.in_old).contiguous() if self.in_extra else None

    def _widen(self, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        y = output
        if self.in_extra:
            new = x.narrow(self.dim, self.in_old, self.in_extra).contiguous()
            assert self.cross_weight is not None
            y = y + self._op(new, self.cross_weight, None) * self.mask
        if self.out_weight is None:
            return y
        return torch.cat([y, self._op(x, self.out_weight, self.out_bias)], dim=self.dim)

    def fold(self) -> tuple[nn.Module, list[FoldedParam]]:
        """The user's layer itself, widened in place (new parameters of the new width,
        its sizes updated) to compute this one at mask 1, and how each of its new
        parameters was assembled. Call it detached (:meth:`detach`)."""
        if self.in_extra and float(self.mask) != 1.0:
            raise WidthError(f"fold needs the mask at 1, it is {float(self.mask):g}")
        base = cast(nn.Linear | nn.Conv2d, self.base)
        ins, outs = self.in_old + self.in_extra, int(base.weight.shape[0]) + self.out_extra
        pieces = tuple(
            p for p in (base.weight, self.cross_weight, self.out_weight) if p is not None
        )
        assemble = conv_assembler(self.cross_weight is not None, self.out_weight is not None)
        folded = [set_assembled(base, "weight", pieces, assemble)]
        if base.bias is not None and self.out_bias is not None:
            folded.append(set_assembled(base, "bias", (base.bias, self.out_bias), cat0))
        # Else the same bias (no new outputs), its optimizer state with it.
        if isinstance(base, nn.Conv2d):
            base.in_channels, base.out_channels = ins, outs
        else:
            base.in_features, base.out_features = ins, outs
        return base, folded


class WidenedNorm(_OnLayer):
    """A BatchNorm over the old channels (``base``, the user's, unchanged) and ``extra``
    new ones."""

    def __init__(self, base: Norm, extra: int) -> None:
        super().__init__(base)
        self.width = int(base.num_features)
        like = next(iter([*base.parameters(), *base.buffers()]))
        norm = type(base)(extra, base.eps, base.momentum, base.affine, base.track_running_stats)
        self.extra = norm.to(device=like.device)
        self.extra.requires_grad_(base.weight is None or base.weight.requires_grad)

    def new_parameters(self) -> list[nn.Parameter]:
        return list(self.extra.parameters())

    def _old_input(self, x: torch.Tensor) -> torch.Tensor | None:
        return x[:, : self.width].contiguous()

    def _widen(self, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        new = x[:, self.width :].contiguous()
        return torch.cat([output, self.extra(new)], dim=1)

    def fold(self) -> tuple[nn.Module, list[FoldedParam]]:
        """The user's BatchNorm itself over the old and the new channels (in place)."""
        folded: list[FoldedParam] = []
        base = cast(Norm, self.base)
        if isinstance(base, nn.BatchNorm1d):
            wide: Norm = fold_norm(base, cast(nn.BatchNorm1d, self.extra), folded)
        else:
            wide = fold_norm(base, cast(nn.BatchNorm2d, self.extra), folded)
        for name in ("weight", "bias", "running_mean", "running_var"):
            if getattr(base, name) is not None:
                setattr(base, name, getattr(wide, name))
        base.num_features = wide.num_features
        return base, folded


class LayerWidening:
    """The width growth of ``pairs`` of ``root`` from ``old`` to ``new`` widths (one per
    pair): a :class:`~esper_core.lifecycle.host_growth.HostOperation`. Every part rides
    on the user's own module (:class:`_OnLayer`); none takes its place. ``swapped`` runs
    after every install, fold or restore (the host puts its slot hooks back);
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
        self.root, self.swapped = root, swapped
        self._masked: dict[str, MaskedLayer | WidenedNorm] = {}
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

    def install(self) -> None:
        for part in self._masked.values():
            part.attach()
        self.swapped()

    def set_mask(self, value: float) -> None:
        for part in self._masked.values():
            mask = getattr(part, "mask", None)
            if mask is not None:
                mask.fill_(value)

    def new_parameters(self) -> list[nn.Parameter]:
        return [p for part in self._masked.values() for p in part.new_parameters()]

    def fold(self) -> list[FoldedParam]:
        """Each of the user's modules widened in place: the same object, class, attributes
        and hooks, with parameters of the new width (the optimizer follows them)."""
        folded: list[FoldedParam] = []
        for part in self._masked.values():
            part.detach()
            folded.extend(part.fold()[1])
        for fold in folded:  # frozen as the user's piece was
            fold.merged.requires_grad_(fold.pieces[0].requires_grad)
        self._masked.clear()
        self.swapped()
        return folded

    def restore(self) -> None:
        """The user's modules as they were: the growth's parts taken off them."""
        for part in self._masked.values():
            part.detach()
        self._masked.clear()
        self.swapped()

    def touches(self, spec: InjectionSpec) -> bool:
        return spec.slot_id in self._touched
