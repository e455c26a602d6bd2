"""The host protocol: a network split into ordered segments with slots between them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from attrs import frozen

if TYPE_CHECKING:
    import torch
    from torch import nn


def slot_id(row: int, col: int) -> str:
    return f"r{row}c{col}"


@frozen
class InjectionSpec:
    """Where a slot sits: after segment ``segment``, on activations with ``channels`` features.

    ``next_channels`` and ``next_stride``: the output channels and spatial down-sampling of
    the segment that follows the slot (what a branch seed, a parallel branch of that
    segment, must produce); ``next_channels`` is None where no segment follows or the host
    cannot say (the last slot, routed hosts), and no branch seed may grow there.
    """

    slot_id: str
    channels: int
    topology: str
    segment: int
    next_channels: int | None = None
    next_stride: int = 1


@runtime_checkable
class HostProtocol(Protocol):
    """What :class:`esper_core.lifecycle.model.MorphogeneticModel` needs from a host ``nn.Module``.

    ``forward(x)`` must equal ``forward_head(forward_segment(n-1, ... forward_segment(0, x)))``
    computed by exactly those calls, so a model with every slot empty is bit-identical
    to the bare host.
    """

    topology: str

    def num_segments(self) -> int: ...

    def injection_specs(self) -> tuple[InjectionSpec, ...]: ...

    def forward_segment(self, index: int, x: torch.Tensor) -> torch.Tensor: ...

    def forward_head(self, x: torch.Tensor) -> torch.Tensor: ...

    def forward(self, x: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class RoutedHost(Protocol):
    """A host that runs its own forward and sends slot activations through ``route``'s
    callables (by forward hooks, see :mod:`esper_core.grow.module_host`): a user's model,
    which has no segments to call one by one. With every slot empty it is the bare model."""

    topology: str

    def injection_specs(self) -> tuple[InjectionSpec, ...]: ...

    def route(self, routes: Mapping[str, Callable[[torch.Tensor], torch.Tensor]]) -> None: ...

    def forward(self, x: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class WidenableHost(Protocol):
    """Optional: a CNN host whose conv stages host width growth can widen
    (:mod:`esper_core.lifecycle.host_width`).

    ``conv_stages()[i]`` is an ``nn.Sequential`` of Conv2d (+ BatchNorm2d) layers and
    channel-wise modules; it feeds stage ``i + 1``, and the last feeds ``head``, an
    ``nn.Linear`` over the globally pooled channels. The growth replaces these modules in
    place and reports the new widths through :meth:`set_stage_channels`, after which
    :meth:`injection_specs` describes the slots at those widths.
    """

    head: nn.Module

    def injection_specs(self) -> tuple[InjectionSpec, ...]: ...

    def conv_stages(self) -> nn.ModuleList: ...

    def stage_channels(self) -> tuple[int, ...]: ...

    def set_stage_channels(self, channels: tuple[int, ...]) -> None: ...


@runtime_checkable
class OwnsSlots(Protocol):
    """A routed host whose own module holds the slots (a user's model): that module's
    ``parameters()``, ``state_dict()``, ``.to()`` and copies then include the seeds, as
    they do for a PEFT adapter. The model that grows it registers the slots only there."""

    def adopt(self, slots: nn.ModuleDict) -> nn.ModuleDict: ...  # the container it holds

    def release(self) -> nn.ModuleDict | None: ...

    def without_slots(self) -> AbstractContextManager[None]: ...
