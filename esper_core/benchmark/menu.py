"""A pair's oracle menu: ``wait`` and each growth operator its host takes, at each moment.

Pure: :func:`build_menu` reads a :class:`HostOffer` (what the host takes, found by
:mod:`esper_core.benchmark.probe` from the env itself) and writes the fixed decisions an
oracle chooses among. Each entry is an ordinary policy: a seed is ``policies.schedule``
germinating ``blueprint@slot`` at a moment; host widening and deepening are
``policies.static`` with ``widen_at`` or ``deepen_at``. ``wait`` comes first, so of
entries that score alike on validation the oracle is ``wait`` (the choice rule keeps the
first of ties).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
from attrs import frozen

from esper_core.compare.experiment import Arm

WAIT = "wait"


@frozen
class SlotOffer:
    """A slot a seed may germinate in, and the menu's blueprints that fit it."""

    slot_id: str
    blueprints: tuple[str, ...]


@frozen
class HostOffer:
    """What a pair's host takes; a refusal is the env's own one-line reason."""

    topology: str
    slots: tuple[SlotOffer, ...] = ()
    widen_refused: str | None = None  # None: the host can widen
    deepen_refused: str | None = None  # None: the host can deepen
    # Menu blueprints of the topology that are not installed.
    missing_blueprints: tuple[str, ...] = ()
    # The env.blueprints of the seed entries when a menu blueprint is opt-in (not in the
    # run's default set); None: the default set holds every one.
    env_blueprints: tuple[str, ...] | None = None
    deepen_mode: str = "stack"  # stack (G_stack) where the host takes it, else identity


@frozen
class MenuEntry:
    """One fixed decision: ``policy`` (a component) with ``options``."""

    label: str
    policy: str
    options: dict[str, Any] = attrs.field(factory=dict)
    operator: str = WAIT  # wait | seed | widen | deepen
    at: float | None = None
    config: dict[str, Any] = attrs.field(factory=dict)  # a partial run config of its cells

    def arm(self) -> Arm:
        return Arm(self.label, self.policy, self.policy, dict(self.options), dict(self.config))


def _at(moment: float) -> str:
    return f"at{moment:g}"


def _name(slot_id: str) -> str:
    # A user's slot is named after its module's path (body/1): labels name directories.
    return re.sub(r"[^A-Za-z0-9._-]+", ".", slot_id)


def build_menu(
    offer: HostOffer,
    moments: Sequence[float],
    widen_factor: float,
    deepen_factor: int,
) -> list[MenuEntry]:
    """``wait``, then every seed at each slot, then widening, then deepening, each at
    every moment, in that order (the order ties are broken in)."""
    menu = [MenuEntry(WAIT, WAIT)]
    config = (
        {} if offer.env_blueprints is None else {"env": {"blueprints": list(offer.env_blueprints)}}
    )
    for slot in offer.slots:
        for blueprint in slot.blueprints:
            for at in moments:
                menu.append(
                    MenuEntry(
                        f"{blueprint}-{_name(slot.slot_id)}-{_at(at)}",
                        "schedule",
                        {"seeds": [f"{blueprint}@{slot.slot_id}"], "at": at},
                        "seed",
                        at,
                        config,
                    )
                )
    growths = (
        ("widen", offer.widen_refused, {"widen_factor": widen_factor}),
        (
            "deepen",
            offer.deepen_refused,
            {"deepen_factor": deepen_factor, "deepen_mode": offer.deepen_mode},
        ),
    )
    for operator, refused, extra in growths:
        if refused is not None:
            continue
        for at in moments:
            options = {f"{operator}_at": at, **extra}
            menu.append(MenuEntry(f"{operator}-{_at(at)}", "static", options, operator, at))
    return menu


def refusals(offer: HostOffer) -> list[str]:
    """What the menu leaves out and why, one line each (written into the results)."""
    lines = []
    if not offer.slots:
        lines.append("seeds: no slot where a menu blueprint can germinate")
    if offer.missing_blueprints:
        lines.append(f"seeds: {', '.join(offer.missing_blueprints)} not installed")
    if offer.widen_refused is not None:
        lines.append(f"widen: {offer.widen_refused}")
    if offer.deepen_refused is not None:
        lines.append(f"deepen: {offer.deepen_refused}")
    return lines
