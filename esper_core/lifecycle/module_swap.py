"""The module bookkeeping every width growth shares: masked modules put in place of the
host's own, their masks moved together, folded into plain modules at the same places,
or the very originals put back.

A :class:`ModuleSwap` is keyed by where a module sits (a stage index for a CNN's conv
stages, a dotted name for a transformer's or a user's layers); a subclass says how to put
a module there (:meth:`ModuleSwap._put`) and builds ``_masked`` in its constructor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Generic, TypeVar

from torch import nn

from esper_core.lifecycle.width_fold import FoldedParam

K = TypeVar("K", bound=Hashable)


def put(root: nn.Module, name: str, module: nn.Module) -> nn.Module:
    """Put ``module`` at the dotted ``name`` in ``root``; return what was there."""
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name)
    old = parent.get_submodule(child)
    setattr(parent, child, module)
    return old


class ModuleSwap(ABC, Generic[K]):
    """``_masked``: the growth's modules by place, each with ``new_parameters()`` and
    ``fold() -> (plain module, folded parameters)``, and a ``mask`` buffer where the
    growth's alpha gates it (a module that only reads masked channels has none)."""

    def __init__(self) -> None:
        self._masked: dict[K, nn.Module] = {}
        self._originals: dict[K, nn.Module] = {}

    @abstractmethod
    def _put(self, key: K, module: nn.Module) -> nn.Module:
        """Put ``module`` at ``key`` in the host; return what was there."""

    def _swapped(self) -> None:
        """After every exchange of modules (a host that hooks its modules re-hooks here)."""

    def install(self) -> None:
        for key, module in self._masked.items():
            self._originals[key] = self._put(key, module)
        self._swapped()

    def set_mask(self, value: float) -> None:
        for module in self._masked.values():
            mask = getattr(module, "mask", None)
            if mask is not None:
                mask.fill_(value)

    def new_parameters(self) -> list[nn.Parameter]:
        # A module tied to another (a transformer's head to its embedding) shares its
        # new parameters: each once.
        unique = {id(p): p for m in self._masked.values() for p in m.new_parameters()}  # type: ignore[operator]
        return list(unique.values())

    def fold(self) -> list[FoldedParam]:
        folded: list[FoldedParam] = []
        for key, module in self._masked.items():
            plain, parts = self._fold_one(key, module)
            self._put(key, plain)
            folded.extend(parts)
        self._masked.clear()
        self._swapped()
        return folded

    def _fold_one(self, key: K, module: nn.Module) -> tuple[nn.Module, list[FoldedParam]]:
        """The plain module ``module`` folds into at ``key``, and its folded parameters."""
        return module.fold()  # type: ignore[operator]

    def restore(self) -> None:
        for key, module in self._originals.items():
            self._put(key, module)
        self._masked.clear()
        self._swapped()
