"""What every growth of the host itself shares: one alpha ramp through the lifecycle's
stages (BLENDING while it runs, HOLDING at alpha 1, then FOSSILIZED or PRUNED), and an
operation on the host's modules that installs them behind a mask, folds the mask away or
puts the originals back.

A growth operator (:class:`~esper_core.components.growth_operator.GrowthOperator`, from
a plugin) starts a subclass of :class:`HostGrowth` that builds its
:class:`HostOperation` and says what it grows (:meth:`HostGrowth.sizes`,
:meth:`HostGrowth.describe`, :meth:`HostGrowth.record`). At birth alpha is 0 and the
host computes bit for bit what it computed before.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from torch import nn

from esper_core.components.host import InjectionSpec
from esper_core.lifecycle import rules
from esper_core.lifecycle.alpha import CURVES, AlphaSchedule
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.width_fold import FoldedParam

if TYPE_CHECKING:
    from esper_core.lifecycle.slot import SeedSlot


class GrowthError(ValueError):
    """A host growth cannot happen as asked (one line: what, and how to fix it)."""


class WidthError(GrowthError):
    """A host cannot grow in width as asked (its structure, the plan)."""


class DepthError(GrowthError):
    """A host cannot grow in depth as asked."""


class GrowingModel(Protocol):
    """What a growth reads of the model whose host it grows: the host, and the slots a
    growth in flight keeps empty (a :class:`~esper_core.lifecycle.model.MorphogeneticModel`)."""

    @property
    def host(self) -> nn.Module: ...

    def iter_slots(self) -> Iterator[SeedSlot]: ...


class HostOperation(Protocol):
    """The host side of one growth. Built without touching the host; :meth:`install`
    puts the masked modules in (mask 0), then exactly one of :meth:`fold` (mask 1) or
    :meth:`restore`."""

    def install(self) -> None: ...

    def set_mask(self, value: float) -> None: ...

    def new_parameters(self) -> list[nn.Parameter]: ...

    def fold(self) -> list[FoldedParam]:
        """Plain modules in place of the masked ones; how each of their new parameters
        was assembled from pieces (for the optimizer's state)."""
        ...

    def restore(self) -> None:
        """The original modules back in place."""
        ...

    def touches(self, spec: InjectionSpec) -> bool:
        """Whether a seed at this slot must wait for the growth to end."""
        ...


class HostGrowth(ABC):
    """One growth of ``model``'s host, in flight from construction on; a subclass builds
    its :class:`HostOperation` and installs it (:meth:`_install`). ``operator``: its kind
    (``width``, ``depth``), which names it in events; ``operator_name``: the registered
    operator that started it (a checkpoint replays it by that name)."""

    operator: ClassVar[str]
    operator_name: str = ""

    def __init__(self, model: GrowingModel, *, tempo: int, curve: str, born_epoch: int) -> None:
        if curve not in CURVES:
            raise GrowthError(f"curve {curve!r}: expected one of {', '.join(CURVES)}")
        if tempo < 1:
            raise GrowthError(f"tempo {tempo}: the ramp needs at least 1 epoch")
        self.model = model
        self.born_epoch = born_epoch
        self.schedule = AlphaSchedule(curve=curve, ticks=tempo)
        self.stage = Stage.BLENDING
        self._operation: HostOperation | None = None

    def _install(self, operation: HostOperation) -> None:
        self._operation = operation
        operation.install()

    @property
    def operation(self) -> HostOperation:
        assert self._operation is not None, "a host growth installs its operation at birth"
        return self._operation

    # ------------------------------------------------------------ state

    @property
    def alpha(self) -> float:
        return self.schedule.value

    @property
    def in_flight(self) -> bool:
        # A growth is never GERMINATED or TRAINING: live means BLENDING or HOLDING.
        return self.stage in rules.LIVE_STAGES

    def new_parameters(self) -> list[nn.Parameter]:
        """The parameters this growth added, while it is in flight."""
        return self.operation.new_parameters() if self.in_flight else []

    def new_param_count(self) -> int:
        return sum(p.numel() for p in self.new_parameters())

    def set_alpha(self, value: float) -> None:
        """Set every mask of the growth (a checkpoint's, or a test's)."""
        self.operation.set_mask(value)

    def tick(self) -> float:
        """One epoch of the ramp; at its end the growth is HOLDING (alpha 1)."""
        if not self.in_flight:
            self._refuse("tick")
        value = self.schedule.tick()
        self.set_alpha(value)
        if self.schedule.done and value == self.schedule.target:
            self.stage = Stage.HOLDING
        return value

    # ------------------------------------------------------------ fossilize / prune

    def fossilize(self) -> list[FoldedParam]:
        """Fold the masks away: the host's modules become plain ones. Returns how each
        new parameter was assembled, for the optimizer's state."""
        if self.stage != Stage.HOLDING:
            self._refuse("fossilize")
        folded = self.operation.fold()
        self.stage = Stage.FOSSILIZED
        return folded

    def prune(self) -> None:
        """Put the original modules back: the host computes what the growth computed at
        alpha 0 (its old parameters have trained on meanwhile)."""
        if self.stage not in rules.PRUNABLE_STAGES:
            self._refuse("prune")
        self.operation.restore()
        self._restored()
        self.stage = Stage.PRUNED

    def _restored(self) -> None:  # noqa: B027 (optional: most growths need nothing)
        """What the host's own bookkeeping needs once the original modules are back."""

    # ------------------------------------------------------------ what it grows

    @abstractmethod
    def sizes(self, after: bool) -> dict[str, int]:
        """The sizes it changes by the names a reader knows (``d_model``, ``stage0``,
        ``n_layer``), before the growth or after it."""

    @abstractmethod
    def describe(self) -> str:
        """The plan in words (``d_model 64 -> 128``)."""

    @abstractmethod
    def scale(self) -> float:
        """How many times as large the host grows (the largest ratio of its sizes)."""

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """What a checkpoint needs to start this growth again exactly (the fields of
        :class:`~esper_core.env.host_growth.GrowthRecord` it sets)."""

    # ------------------------------------------------------------ slots

    def affected_slots(self) -> list[str]:
        """Slots that must stay empty while the growth is in flight."""
        return [s.slot_id for s in self.model.iter_slots() if self.operation.touches(s.spec)]

    def _refuse(self, call: str) -> None:
        raise rules.LifecycleError(self.stage, None, call=f"{self.operator} growth {call}")
