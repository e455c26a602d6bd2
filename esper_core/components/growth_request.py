"""What a policy asks of the host itself: one width or depth growth at a given epoch
(WidthGrowthSpec, DepthGrowthSpec, either as HostGrowthSpec), and how cattrs tells the
two apart when an action's request is read back.

Below both the policy protocols (components/policy.py) and the actions
(lifecycle/actions.py), which each name a request: neither imports the other for it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import frozen

from esper_core.converter import converter


@frozen
class WidthGrowthSpec:
    """One host width growth a policy schedules: at the start of epoch
    ``round(at x max_epochs)`` the host's conv ``stages`` (all when empty) widen to
    ``round(factor x`` their channels``)`` (a transformer's ``d_model``, with ``stages``
    empty), behind a mask ramped 0 -> 1 over ``tempo``
    epochs along ``curve``, and are folded into the host (fossilized) when it reaches 1.
    ``cross_init``: how the weights from the new channels into the existing ones start
    (``random``, or ``zero``). ``operator``: the growth operator by name (empty: the
    installed width operator the host declares sites for; see
    :mod:`esper_core.components.growth_operator`)."""

    kind: ClassVar[str] = "width"

    at: float
    factor: float = 2.0
    stages: tuple[int, ...] = ()
    tempo: int = 5
    curve: str = "linear"
    cross_init: str = "random"
    operator: str = ""

    def epoch(self, max_epochs: int) -> int:
        return round(self.at * max_epochs)


@frozen
class DepthGrowthSpec:
    """One host depth growth a policy schedules: at the start of epoch
    ``round(at x max_epochs)`` a transformer host's stack of blocks grows ``factor`` times
    as deep, the new blocks copies of the stack (``mode = "stack"``: G_stack) or fresh
    ones (``"identity"``), each behind a mask ramped 0 -> 1 over ``tempo`` epochs along
    ``curve``, then folded into the host. A CNN host's ``stages`` (all when empty) each
    grow ``factor`` times as deep before their pools. ``operator``: as for width."""

    kind: ClassVar[str] = "depth"

    at: float
    mode: str = "stack"
    factor: int = 2
    tempo: int = 5
    curve: str = "linear"
    stages: tuple[int, ...] = ()
    operator: str = ""

    def epoch(self, max_epochs: int) -> int:
        return round(self.at * max_epochs)


HostGrowthSpec = WidthGrowthSpec | DepthGrowthSpec


def _structure_request(value: Any, _: Any) -> HostGrowthSpec | None:
    # Both specs need only ``at``, so cattrs cannot tell them apart; depth alone has a mode.
    if value is None:
        return None
    if isinstance(value, dict) and "mode" in value:
        return converter.structure(value, DepthGrowthSpec)
    return converter.structure(value, WidthGrowthSpec)


# An action's request (Action.host_growth) round-trips through cattrs (the Grower's state).
converter.register_structure_hook_func(lambda t: t == HostGrowthSpec | None, _structure_request)
