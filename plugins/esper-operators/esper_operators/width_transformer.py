"""Masked growth of a transformer's residual width ``d_model`` (MSG, Yao et al. 2024).

From ``d`` to ``D`` features: the residual stream, the attention (``D / head_dim``
heads of the same size) and the MLP's hidden layer (``expansion x D``) all widen, in
every module the host lists (:class:`~esper_core.components.host.WidthSite`). The
design masks every *read* of a new feature by the growth's mask ``m``, and nothing else:

- a linear layer computes its old outputs as ``base(x_old) + F.linear(m x_new, cross)``
  and its new outputs (new heads, new MLP units) from ``[x_old, m x_new]``;
- a LayerNorm weighs the new features' share of its mean and variance by ``m`` (1 for
  the old ones), so at ``m = 0`` the old features are normalised as before and at
  ``m = 1`` it is the plain LayerNorm over ``D``, which is what the fold produces;
- the embeddings write the new features unmasked (their reads are masked), and a tied
  head reads the LayerNorm's output through the embedding's new columns, masked.

At ``m = 0`` every new feature is read as an exact zero, so each old output is
``base(x_old) + 0``: the host computes bit for bit what it computed before, in training
mode too (the old path runs the original modules on contiguous inputs of the original
shape; a LayerNorm selects the original module's own output with ``torch.where``, as the
weighted statistics round differently). The attention is the host's own code with
``D / head_dim`` heads: each head attends on its own, so the old heads compute what they
did (tested on CPU). The new parameters start as the host initialises its own (the
site's normal ``std``; zero biases; unit LayerNorm gains); the weights from new inputs
into old outputs by ``cross_init`` (``random``: the site's ``std``; ``zero``).

Why masked reads rather than the CNN's masked outputs (``MaskedConvStage`` multiplies
each new channel by ``m``): a LayerNorm mixes every feature of the residual stream, so
a zero new feature would still shift its statistics; weighting the statistics keeps the
old features exact at ``m = 0`` and makes ``m = 1`` the plain LayerNorm, with one mask
rule for every module. Masking at the reader also leaves the writers (embeddings,
residual projections) plain.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from esper_core.components.host import InjectionSpec, WidenableTransformer, WidthSite
from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.module_swap import ModuleSwap, put
from esper_core.lifecycle.width_fold import FoldedParam
from esper_operators.width_transformer_modules import (
    MaskedLayerNorm,
    MaskedLinear,
    Widened,
    WidenedEmbedding,
)


class ResidualWidening(ModuleSwap[str]):
    """A transformer's ``d_model`` from ``old`` to ``new`` in every module of its
    :meth:`~esper_core.components.host.WidenableTransformer.width_sites` (see the module
    docstring). Every slot sits on the residual stream: the growth touches them all."""

    def __init__(
        self,
        host: WidenableTransformer,
        old: int,
        new: int,
        generator: torch.Generator | None,
        cross_init: str,
    ) -> None:
        step = host.width_step()
        if new <= old or new % step:
            raise WidthError(
                f"d_model {old} -> {new}: a transformer widens to a larger multiple of its "
                f"head dimension {step}"
            )
        super().__init__()
        self.host = cast(nn.Module, host)
        self.old, self.new = (old,), (new,)
        extra = new - old
        self._tied: dict[str, str] = {}  # linear path -> embedding path
        self._tables: dict[str, nn.Parameter] = {}  # embedding path -> its folded table
        for site in host.width_sites():
            module = self.host.get_submodule(site.path)
            self._masked[site.path] = self._widen(site, module, old, extra, generator, cross_init)

    def _widen(
        self,
        site: WidthSite,
        module: nn.Module,
        old: int,
        extra: int,
        generator: torch.Generator | None,
        cross_init: str,
    ) -> Widened:
        where = f"{site.path} ({type(module).__name__})"
        if isinstance(module, nn.Embedding):
            if site.writes < 1 or module.embedding_dim != site.writes * old:
                raise WidthError(
                    f"{where}: {module.embedding_dim} columns, not {site.writes} x {old}"
                )
            return WidenedEmbedding(module, site.writes * extra, site.std, generator)
        if isinstance(module, nn.LayerNorm):
            if site.reads < 1 or tuple(module.normalized_shape) != (site.reads * old,):
                raise WidthError(
                    f"{where}: normalises {tuple(module.normalized_shape)}, not {site.reads} x {old}"
                )
            return MaskedLayerNorm(module, site.reads * extra)
        if not isinstance(module, nn.Linear):
            raise WidthError(
                f"{where}: width growth widens nn.Embedding, nn.LayerNorm and nn.Linear"
            )
        if site.reads and module.in_features != site.reads * old:
            raise WidthError(f"{where}: {module.in_features} inputs, not {site.reads} x {old}")
        if site.writes and module.out_features != site.groups * site.writes * old:
            raise WidthError(
                f"{where}: {module.out_features} outputs, not {site.groups} x {site.writes} x {old}"
            )
        shared = None
        if site.tied_to is not None:
            table = self._masked.get(site.tied_to)
            if not isinstance(table, WidenedEmbedding) or module.weight is not table.base.weight:
                raise WidthError(
                    f"{where}: tied to {site.tied_to}, which is not its embedding, listed before it"
                )
            shared = table.new.weight
            self._tied[site.path] = site.tied_to
        return MaskedLinear(
            module,
            site.reads * extra,
            site.writes * extra,
            groups=site.groups,
            std=site.std,
            generator=generator,
            cross_init=cross_init,
            shared=shared,
        )

    def _fold_one(self, key: str, module: nn.Module) -> tuple[nn.Module, list[FoldedParam]]:
        # A tied head folds onto its embedding's new table (folded before it).
        if isinstance(module, MaskedLinear):
            tied = self._tied.get(key)
            return module.fold(self._tables[tied] if tied is not None else None)
        plain, parts = module.fold()  # type: ignore[operator]
        if isinstance(plain, nn.Embedding):
            self._tables[key] = cast(nn.Parameter, plain.weight)
        return plain, parts

    def touches(self, spec: InjectionSpec) -> bool:
        return True

    def _put(self, key: str, module: nn.Module) -> nn.Module:
        return put(self.host, key, module)
