"""The host protocol: a network split into ordered segments with slots between them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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
class HasWidths(Protocol):
    """Optional: a host whose width can grow (:mod:`esper_operators.host_width`).

    ``stage_channels()`` are its widths, one per part that widens on its own (a CNN's
    stages; a transformer's one residual width, ``d_model``). A width growth replaces the
    host's modules in place and reports the new widths through
    :meth:`set_stage_channels`, after which :meth:`injection_specs` describes the slots at
    those widths. A host implements one of the two kinds below.
    """

    def injection_specs(self) -> tuple[InjectionSpec, ...]: ...

    def stage_channels(self) -> tuple[int, ...]: ...

    def set_stage_channels(self, channels: tuple[int, ...]) -> None: ...


@runtime_checkable
class WidenableHost(HasWidths, Protocol):
    """A CNN host whose conv stages host width growth can widen.

    ``conv_stages()[i]`` is an ``nn.Sequential`` of Conv2d (+ BatchNorm2d) layers and
    channel-wise modules; it feeds stage ``i + 1``, and the last feeds ``head``, an
    ``nn.Linear`` over the globally pooled channels.
    """

    head: nn.Module

    def conv_stages(self) -> nn.ModuleList: ...


@runtime_checkable
class WidensItsLayers(HasWidths, Protocol):
    """A host that builds its own width growth: the Grower's host over a user's module,
    whose widths are its layer pairs' (:mod:`esper_core.grow.layer_pairs`).
    :meth:`layer_widening` returns the
    :class:`~esper_core.lifecycle.host_growth.HostOperation` from widths ``old`` to ``new``."""

    def stage_names(self) -> tuple[str, ...]:
        """Each width's name for a reader (a pair's ``producer -> consumer``)."""
        ...

    def width_refusal(self) -> str:
        """Why no width can grow, one line (read when :meth:`stage_channels` is empty)."""
        ...

    def layer_widening(
        self,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> Any: ...


@frozen
class WidthSite:
    """A module of a :class:`WidenableTransformer` that a residual-width growth widens,
    by its dotted ``path`` in the host: an ``nn.Embedding`` (it writes the residual
    stream), an ``nn.LayerNorm`` over it, or an ``nn.Linear``.

    ``reads`` and ``writes``: the module's input and output widths as multiples of
    ``d_model`` (1: the residual stream or the attention heads, 4: an MLP's hidden
    layer, 0: a width that does not grow, such as the vocabulary). ``groups``: the output
    is this many equal parts, each widened at its end (a fused q/k/v projection: 3).
    ``std``: the normal init of the module's new weights, as the host initialises its own.
    ``tied_to``: the path of the embedding whose table this linear layer reads (a tied
    head), its new columns included.
    """

    path: str
    reads: int
    writes: int
    groups: int = 1
    std: float = 0.02
    tied_to: str | None = None


@runtime_checkable
class WidenableTransformer(HasWidths, Protocol):
    """A transformer host whose residual width ``d_model`` (its one entry of
    ``stage_channels()``) can grow: every module that reads or writes that width (or a
    multiple of it, such as the MLP's hidden layer and the attention heads) is listed by
    :meth:`width_sites`. ``d_model`` stays a multiple of :meth:`width_step` (the head
    dimension: heads keep their size, their number grows); ``set_stage_channels`` sets
    the head count to match.
    """

    def width_sites(self) -> tuple[WidthSite, ...]: ...

    def width_step(self) -> int: ...


@runtime_checkable
class DeepenableTransformer(Protocol):
    """A transformer host whose stack of residual blocks can grow in depth (host depth
    growth, :mod:`esper_operators.host_depth`): each block maps the residual stream
    ``x`` to ``x + f(x)``, of the same shape, so a block born behind a mask can start as
    the identity. New blocks go on top of the stack, in :meth:`top_stage` (the last
    segment, before the head), so every slot keeps the blocks it follows."""

    def num_segments(self) -> int: ...

    def residual_blocks(self) -> tuple[nn.Module, ...]:
        """Every block of the stack, in the order of the forward pass."""
        ...

    def top_stage(self) -> nn.Sequential:
        """The container the stack's top blocks are in: new blocks are appended to it."""
        ...

    def new_block(self, generator: torch.Generator, n_layer: int) -> nn.Module:
        """A fresh block, initialised as the host initialises its own in a stack of
        ``n_layer`` blocks, drawing only from ``generator``."""
        ...

    def set_depth(self, n_layer: int) -> None:
        """The number of blocks after a depth growth changed the stack."""
        ...


@runtime_checkable
class DeepenableCNN(Protocol):
    """A CNN host whose conv stages can grow in depth (host depth growth,
    :mod:`esper_operators.deepening_cnn`): ``depth_stages()[i]`` is an
    ``nn.Sequential`` of conv layers (Conv2d, BatchNorm2d, channel-wise modules), then
    its pool, if any, and any layers after the pool. New layers keep the stage's width
    and resolution, so they go after the stage's last layer before the pool; a layer
    born behind a mask starts as the identity."""

    def num_segments(self) -> int: ...

    def injection_specs(self) -> tuple[InjectionSpec, ...]: ...

    def stage_channels(self) -> tuple[int, ...]: ...

    def depth_stages(self) -> nn.ModuleList: ...

    def new_layer(self, channels: int, generator: torch.Generator) -> nn.Sequential:
        """A fresh ``channels -> channels`` layer, initialised as the host initialises its
        own, drawing only from ``generator``."""
        ...


@runtime_checkable
class OwnsSlots(Protocol):
    """A routed host whose own module holds the slots (a user's model): that module's
    ``parameters()``, ``state_dict()``, ``.to()`` and copies then include the seeds, as
    they do for a PEFT adapter. The model that grows it registers the slots only there."""

    def adopt(self, slots: nn.ModuleDict) -> nn.ModuleDict: ...  # the container it holds

    def release(self) -> nn.ModuleDict | None: ...

    def without_slots(self) -> AbstractContextManager[None]: ...
