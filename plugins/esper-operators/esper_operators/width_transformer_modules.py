"""The modules of a transformer's masked width growth: a linear layer, a LayerNorm and an
embedding that read their new features through the growth's mask (the design is in
:mod:`esper_operators.width_transformer`), and the helpers that assemble them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import skip_init

from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.width_fold import FoldedParam, cat0, cat1, set_assembled
from esper_core.lifecycle.width_parts import CROSS_INITS


def _normal(
    shape: tuple[int, ...], std: float, like: torch.Tensor, gen: torch.Generator | None
) -> torch.Tensor:
    """Drawn on the CPU from ``gen`` (the same numbers on every device), then moved."""
    out = torch.empty(shape, dtype=like.dtype)
    out.normal_(0.0, std, generator=gen)
    return out.to(like.device)


def interleave(old: torch.Tensor, new: torch.Tensor, groups: int, dim: int) -> torch.Tensor:
    """``groups`` equal parts of ``old`` along ``dim``, each followed by its part of
    ``new``: the layout of a widened fused projection (q, k, v each widened at its end)."""
    if groups == 1:
        return torch.cat([old, new], dim=dim)
    pairs = zip(old.chunk(groups, dim=dim), new.chunk(groups, dim=dim))
    return torch.cat([part for pair in pairs for part in pair], dim=dim)


def linear_assembler(
    has_cross: bool, has_out: bool, groups: int
) -> Callable[[Sequence[torch.Tensor]], torch.Tensor]:
    """A widened linear weight from its pieces ``[old, cross?, out?]``: the old rows with
    the cross columns beside them, the new rows interleaved by ``groups``."""

    def assemble(parts: Sequence[torch.Tensor]) -> torch.Tensor:
        it = iter(parts)
        rows = next(it)
        if has_cross:
            rows = torch.cat([rows, next(it)], dim=1)
        if has_out:
            rows = interleave(rows, next(it), groups, dim=0)
        return rows

    return assemble


class MaskedLinear(nn.Module):
    """``base`` with ``in_extra`` new inputs (read masked) and ``out_extra`` new outputs
    in each of its ``groups`` output parts.

    New parameters: ``cross_weight`` (old outputs from new inputs; ``shared``: an
    existing parameter instead, a tied head's embedding columns), ``out_weight`` and
    ``out_bias`` (new outputs from every input).
    """

    def __init__(
        self,
        base: nn.Linear,
        in_extra: int,
        out_extra: int,
        *,
        groups: int = 1,
        std: float = 0.02,
        generator: torch.Generator | None = None,
        cross_init: str = "random",
        shared: nn.Parameter | None = None,
    ) -> None:
        super().__init__()
        self.mask: torch.Tensor
        if in_extra < 0 or out_extra < 0 or in_extra + out_extra == 0:
            raise WidthError(
                f"a masked linear needs new features, got in {in_extra}, out {out_extra}"
            )
        if base.out_features % groups:
            raise WidthError(f"{base.out_features} outputs do not split into {groups} groups")
        if cross_init not in CROSS_INITS:
            raise WidthError(f"cross_init {cross_init!r}: expected one of {', '.join(CROSS_INITS)}")
        self.base = base
        self.in_features, self.in_extra = int(base.in_features), in_extra
        self.out_extra, self.groups = out_extra, groups
        self.register_buffer("mask", torch.zeros((), device=base.weight.device))
        w = base.weight
        self.cross_weight: nn.Parameter | None = None
        if in_extra:
            if shared is not None:
                if shared.shape != (base.out_features, in_extra):
                    raise WidthError(
                        f"a tied linear's new columns are {tuple(shared.shape)}, expected "
                        f"{(base.out_features, in_extra)}"
                    )
                self.cross_weight = shared
            else:
                cross = _normal((base.out_features, in_extra), std, w, generator)
                if cross_init == "zero":
                    cross.zero_()
                self.cross_weight = nn.Parameter(cross)
        self.out_weight: nn.Parameter | None = None
        self.out_bias: nn.Parameter | None = None
        if out_extra:
            shape = (groups * out_extra, self.in_features + in_extra)
            self.out_weight = nn.Parameter(_normal(shape, std, w, generator))
            if base.bias is not None:
                self.out_bias = nn.Parameter(w.new_zeros(groups * out_extra))

    def new_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.cross_weight, self.out_weight, self.out_bias) if p is not None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_new: torch.Tensor | None = None
        if self.in_extra:
            # Contiguous, as the unwidened layer's input was: a matrix product may round
            # differently on a strided input.
            x_old = x[..., : self.in_features].contiguous()
            x_new = x[..., self.in_features :] * self.mask.to(x.dtype)
        else:
            x_old = x
        y: torch.Tensor = self.base(x_old)
        if x_new is not None:
            assert self.cross_weight is not None
            y = y + F.linear(x_new, self.cross_weight)
        if self.out_weight is None:
            return y
        inputs = x_old if x_new is None else torch.cat([x_old, x_new], dim=-1)
        return interleave(y, F.linear(inputs, self.out_weight, self.out_bias), self.groups, -1)

    def fold(self, tied: nn.Parameter | None = None) -> tuple[nn.Linear, list[FoldedParam]]:
        """A plain ``nn.Linear`` computing this layer at mask 1; ``tied``: its weight is
        that parameter (a tied head's, the folded embedding table)."""
        base = self.base
        wide = skip_init(
            nn.Linear,
            self.in_features + self.in_extra,
            base.out_features + self.groups * self.out_extra,
            bias=base.bias is not None,
            device=base.weight.device,
            dtype=base.weight.dtype,
        )
        folded: list[FoldedParam] = []
        if tied is not None:
            wide.weight = tied
        else:
            pieces = [base.weight]
            if self.cross_weight is not None:
                pieces.append(self.cross_weight)
            if self.out_weight is not None:
                pieces.append(self.out_weight)
            assemble = linear_assembler(
                self.cross_weight is not None, self.out_weight is not None, self.groups
            )
            folded.append(set_assembled(wide, "weight", tuple(pieces), assemble))
        if base.bias is not None and self.out_bias is not None:
            groups = self.groups
            folded.append(
                set_assembled(
                    wide,
                    "bias",
                    (base.bias, self.out_bias),
                    lambda parts: interleave(parts[0], parts[1], groups, dim=0),
                )
            )
        elif base.bias is not None:
            wide.bias = base.bias  # no new outputs: the same bias, its optimizer state with it
        return wide.train(self.training), folded


class MaskedLayerNorm(nn.Module):
    """``base`` (a LayerNorm over the last dimension) over ``extra`` more features, whose
    share of the statistics is weighted by the mask; ``weight`` and ``bias``: theirs."""

    def __init__(self, base: nn.LayerNorm, extra: int) -> None:
        super().__init__()
        self.mask: torch.Tensor
        if len(base.normalized_shape) != 1 or base.weight is None or base.bias is None:
            raise WidthError(
                "width growth widens a LayerNorm over the last dimension with a gain and a "
                f"bias; got normalized_shape {tuple(base.normalized_shape)}, "
                f"gain {base.weight is not None}, bias {base.bias is not None}"
            )
        if extra < 1:
            raise WidthError(f"a masked LayerNorm needs new features, got {extra}")
        self.base = base
        self.features, self.extra = int(base.normalized_shape[0]), extra
        w = base.weight
        self.register_buffer("mask", torch.zeros((), device=w.device))
        self.weight = nn.Parameter(w.new_ones(extra))
        self.bias = nn.Parameter(w.new_zeros(extra))

    def new_parameters(self) -> list[nn.Parameter]:
        return [self.weight, self.bias]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = self.base
        assert base.weight is not None and base.bias is not None
        x_old = x[..., : self.features].contiguous()
        x_new = x[..., self.features :]
        m = self.mask.to(x.dtype)
        count = self.features + m * self.extra
        mean = (x_old.sum(-1, keepdim=True) + m * x_new.sum(-1, keepdim=True)) / count
        c_old, c_new = x_old - mean, x_new - mean
        var = (
            c_old.square().sum(-1, keepdim=True) + m * c_new.square().sum(-1, keepdim=True)
        ) / count
        inv = torch.rsqrt(var + base.eps)
        weighted = c_old * inv * base.weight + base.bias
        # At mask 0 the weighted statistics are the old features' own, but rounded
        # otherwise than layer_norm's kernel: the original module's bits instead.
        y_old = torch.where(self.mask == 0, base(x_old), weighted)
        return torch.cat([y_old, c_new * inv * self.weight + self.bias], dim=-1)

    def fold(self) -> tuple[nn.LayerNorm, list[FoldedParam]]:
        base = self.base
        assert base.weight is not None and base.bias is not None
        like = base.weight
        wide = skip_init(
            nn.LayerNorm,
            self.features + self.extra,
            base.eps,
            device=like.device,
            dtype=like.dtype,
        )
        folded = [
            set_assembled(wide, "weight", (base.weight, self.weight), cat0),
            set_assembled(wide, "bias", (base.bias, self.bias), cat0),
        ]
        return wide.train(self.training), folded


class WidenedEmbedding(nn.Module):
    """``base`` with ``extra`` more columns (``new``, an ``nn.Embedding`` of its own, so
    the optimizer's weight-decay rule still sees an embedding table). It writes the new
    features unmasked: whatever reads them masks them."""

    def __init__(
        self, base: nn.Embedding, extra: int, std: float, generator: torch.Generator | None
    ) -> None:
        super().__init__()
        if base.padding_idx is not None or base.max_norm is not None or base.sparse:
            raise WidthError(
                "width growth widens a plain nn.Embedding (no padding_idx, max_norm or sparse)"
            )
        if extra < 1:
            raise WidthError(f"a widened embedding needs new columns, got {extra}")
        self.base = base
        w = base.weight
        self.new = skip_init(
            nn.Embedding, base.num_embeddings, extra, device=w.device, dtype=w.dtype
        )
        with torch.no_grad():
            self.new.weight.copy_(_normal((base.num_embeddings, extra), std, w, generator))

    def new_parameters(self) -> list[nn.Parameter]:
        return [self.new.weight]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.base(ids), self.new(ids)], dim=-1)

    def fold(self) -> tuple[nn.Embedding, list[FoldedParam]]:
        w = self.base.weight
        wide = skip_init(
            nn.Embedding,
            self.base.num_embeddings,
            self.base.embedding_dim + self.new.embedding_dim,
            device=w.device,
            dtype=w.dtype,
        )
        return wide, [set_assembled(wide, "weight", (w, self.new.weight), cat1)]


Widened = MaskedLinear | MaskedLayerNorm | WidenedEmbedding
