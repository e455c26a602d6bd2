"""MorphogeneticModel: a host with seed slots between its segments."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.host import HostProtocol, InjectionSpec, OwnsSlots, RoutedHost
from esper_core.errors import ConfigError
from esper_core.lifecycle.rules import FOSSIL_STAGES, LIVE_STAGES
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.slot_state import DEFAULT_SETTINGS, SlotReport, SlotSettings
from esper_core.lifecycle.stages import Stage

if TYPE_CHECKING:
    from esper_core.lifecycle.host_growth import HostGrowth

__all__ = ["HostProtocol", "InjectionSpec", "MorphogeneticModel"]


class MorphogeneticModel(nn.Module):
    """Runs ``segment -> slot -> segment ... -> head``; a branch seed's slot merges its
    increment after the segment that follows it (:meth:`SeedSlot.merge`).

    With every slot empty the computation is the host's own, call for call, so
    outputs and gradients equal the bare host's exactly.
    """

    slots: nn.ModuleDict  # registered here, or (a host that owns slots) on the host's module

    def __init__(
        self,
        host: nn.Module,
        resolve_blueprint: Callable[[str], Blueprint],
        settings: SlotSettings = DEFAULT_SETTINGS,
        slots: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        segmented = isinstance(host, HostProtocol)
        if not segmented and not isinstance(host, RoutedHost):
            raise TypeError(
                f"{type(host).__name__} does not implement esper_core.components.host.HostProtocol "
                "(topology, num_segments, injection_specs, forward_segment, forward_head); "
                "wrap any nn.Module with esper_core.grow.host_from_module"
            )
        self.host = host
        specs: tuple[InjectionSpec, ...] = cast(RoutedHost, host).injection_specs()
        available = [spec.slot_id for spec in specs]
        if slots is not None:
            unknown = [s for s in slots if s not in available]
            if unknown:
                raise ConfigError(
                    [
                        f"env.slots: unknown slot id(s) {', '.join(unknown)}; "
                        f"this host has {', '.join(available)}"
                    ]
                )
            if len(set(slots)) != len(slots):
                raise ConfigError([f"env.slots: slot ids repeat in {list(slots)}"])
        enabled = set(available if slots is None else slots)
        container = nn.ModuleDict(
            {
                spec.slot_id: SeedSlot(spec, resolve_blueprint, settings)
                for spec in specs
                if spec.slot_id in enabled
            }
        )
        if isinstance(host, OwnsSlots):
            # The user's module holds the slots (so its parameters, state_dict and copies
            # have the seeds); registered here as well, every seed would be in this
            # model's state_dict twice. A plain attribute: reached, not registered.
            self.__dict__["slots"] = host.adopt(container)
            self.register_load_state_dict_pre_hook(_slots_moved)
        else:
            self.slots = container
        self._slot_after: dict[int, str] = {
            spec.segment: spec.slot_id for spec in specs if spec.slot_id in enabled
        }
        self._routed = not segmented
        # The host's own growths (width: esper_operators.host_width, depth:
        # host_depth), oldest first: the cost meter, the governor and the trainer ask the
        # one in flight what the host is.
        self.host_growths: list[HostGrowth] = []
        if segmented:
            self._num_segments = cast(HostProtocol, host).num_segments()
        else:
            self._num_segments = 0
            cast(RoutedHost, host).route(dict(self.slots.items()))

    @property
    def host_growth(self) -> HostGrowth | None:
        """The growth of the host in flight (ramping or holding), if any."""
        last = self.host_growths[-1] if self.host_growths else None
        return last if last is not None and last.in_flight else None

    @property
    def topology(self) -> str:
        return str(self.host.topology)

    @contextmanager
    def host_alone(self) -> Iterator[None]:
        """Calling ``self.host`` runs the bare host in here: a routed host (a user's module,
        whose forward hooks run the slots) is unrouted for the while."""
        if not self._routed:
            yield
            return
        host = cast(RoutedHost, self.host)
        host.route({})
        try:
            yield
        finally:
            host.route(dict(self.slots.items()))

    @contextmanager
    def host_own(self) -> Iterator[None]:
        """In here ``self.host``'s parameters and ``state_dict`` are the host's own, without
        the slots a host that owns them (a user's module) holds."""
        if isinstance(self.host, OwnsSlots) and "slots" in self.__dict__:
            with self.host.without_slots():
                yield
        else:
            yield

    def disown(self) -> None:
        """The host gives its slots back (a grower's close()): the user's module is as it
        was given, and this model holds the slots and their seeds from now on."""
        if isinstance(self.host, OwnsSlots) and "slots" in self.__dict__:
            self.host.release()
            slots = self.__dict__.pop("slots")
            self.slots = slots

    @property
    def slot_ids(self) -> list[str]:
        return list(self.slots.keys())

    def slot(self, slot_id: str) -> SeedSlot:
        slot = self.slots[slot_id]
        assert isinstance(slot, SeedSlot)
        return slot

    def slots_device(self) -> torch.device:
        """Where the slots live (their buffers move with ``.to()``, seeds or not)."""
        for slot in self.iter_slots():
            return slot.alpha_tensor.device
        return torch.device("cpu")

    def iter_slots(self) -> Iterator[SeedSlot]:
        for slot in self.slots.values():
            assert isinstance(slot, SeedSlot)
            yield slot

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._routed:
            out: torch.Tensor = self.host(x)  # the slots run inside, from the host's hooks
            return out
        host = cast(HostProtocol, self.host)
        # A branch seed in the slot after segment i reads that slot's activation and adds
        # its increment to segment i + 1's output: carried across one segment, then merged.
        pending: tuple[SeedSlot, torch.Tensor] | None = None
        for index in range(self._num_segments):
            x = host.forward_segment(index, x)
            if pending is not None:
                x = pending[0].merge(pending[1], x)
                pending = None
            slot_id = self._slot_after.get(index)
            if slot_id is not None:
                slot = self.slot(slot_id)
                if slot.is_branch:
                    pending = (slot, slot.branch_input(x))
                else:
                    x = slot(x)
        return host.forward_head(x)

    # ------------------------------------------------------------ parameters

    def host_parameters(self) -> list[nn.Parameter]:
        with self.host_own():
            return list(self.host.parameters())

    def seed_parameters(self, slot_id: str | None = None) -> list[nn.Parameter]:
        if slot_id is not None:
            return self.slot(slot_id).seed_parameters()
        return [p for slot in self.iter_slots() for p in slot.seed_parameters()]

    def host_param_count(self) -> int:
        return sum(p.numel() for p in self.host_parameters())

    def seed_param_count(self, stages: frozenset[Stage] | None = None) -> int:
        return sum(
            slot.seed_param_count()
            for slot in self.iter_slots()
            if stages is None or slot.stage in stages
        )

    def fossil_param_count(self) -> int:
        return self.seed_param_count(FOSSIL_STAGES)

    def live_seed_count(self) -> int:
        return sum(1 for slot in self.iter_slots() if slot.stage in LIVE_STAGES)

    # ------------------------------------------------------------ non-finite seed outputs

    def clear_nonfinite(self) -> None:
        for slot in self.iter_slots():
            slot.clear_nonfinite()

    def nonfinite_counts(self) -> torch.Tensor:
        """Per slot (in :attr:`slot_ids` order), the forwards with a non-finite seed output
        since the last clear; on the device."""
        counts = [slot.nonfinite_outputs for slot in self.iter_slots()]
        return torch.stack(counts) if counts else torch.zeros(0)

    def reports(self) -> list[SlotReport]:
        return [slot.report() for slot in self.iter_slots()]


def _slots_moved(module: nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """A load_state_dict pre-hook: a state saved while this model held the slots itself
    (``slots.*``, before user's modules owned them) loads where they live now."""
    assert isinstance(module, MorphogeneticModel)
    old = prefix + "slots."
    if not any(key.startswith(old) for key in state):
        return
    where = next(name for name, m in module.named_modules() if m is module.slots)
    for key in [key for key in state if key.startswith(old)]:
        state[prefix + where + "." + key[len(old) :]] = state.pop(key)
