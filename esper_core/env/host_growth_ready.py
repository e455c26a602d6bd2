"""Whether a growth a policy may ask for (``GrowsHostOnline``) can start now: the one rule
the observation reports (``Observation.host_growth_ready``), each policy masks its
request by, and the env refuses a request by (:mod:`esper_core.env.host_growth_online`).

A growth can start before the epoch about to train when it passes the checks a
scheduled one passes (:func:`~esper_core.env.host_growth.check_specs`, against the
schedule too), no other growth of the host is in flight, the epoch is not the run's
last (a growth born there would end the run untrained, at alpha 0), and no seed is in
its way: a live seed in a slot the growth touches always is, a fossilized one only
where the operator cannot keep it (the shipped ones all keep it: a depth operator keeps
the activations' shape; a width operator leaves a fossil at the widths it was born at,
on the old channels, and passes the new ones by).
Each operator says which slots a growth touches
(:mod:`esper_core.components.growth_operator`). The check reads the host's plan and the
slots' stages; it builds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from esper_core.env.growing import Checking
from esper_core.env.host_growth import check_specs, operator_for
from esper_core.errors import ConfigError
from esper_core.lifecycle.rules import LIVE_STAGES, SEED_STAGES

if TYPE_CHECKING:
    from esper_core.components.growth_request import HostGrowthSpec


class AtEpoch(Checking, Protocol):
    """What the check reads of an env: also the epoch about to train."""

    @property
    def epoch(self) -> int: ...


class Ready(AtEpoch, Protocol):
    """An env that knows the growths its policy declared (``MorphogeneticEnv`` is one)."""

    @property
    def online_growth_specs(self) -> Sequence[HostGrowthSpec]: ...


def growth_ready(env: Ready) -> tuple[bool, ...]:
    """For each growth the env's policy declared, in order, whether it can start now."""
    return tuple(blocked(env, spec) is None for spec in env.online_growth_specs)


def blocked(env: AtEpoch, spec: HostGrowthSpec) -> str | None:
    """Why ``spec`` cannot start before the epoch ``env.epoch`` trains, in one line; None
    when it can (its ``at`` is not read: the growth would start now)."""
    if env.epoch >= env.max_epochs - 1:
        return f"epoch {env.epoch} is the run's last: a growth born there never trains"
    growth = env.model.host_growth
    if growth is not None:
        return f"a {growth.operator} growth of the host is still in flight"
    now = attrs.evolve(spec, at=env.epoch / env.max_epochs)
    try:
        check_specs((*env.host_growth_specs, now), env)
    except ConfigError as exc:
        return exc.problems[0]
    host = env.model.host
    operator = operator_for(env.operators, host, spec.kind, spec.operator)
    touches = getattr(operator, "touches_slot", None)
    in_the_way = LIVE_STAGES if getattr(operator, "keeps_fossils", False) else SEED_STAGES
    for slot in env.model.iter_slots():
        if slot.stage in in_the_way and (touches is None or touches(host, now, slot.spec)):
            return (
                f"slot {slot.slot_id} holds a seed ({slot.stage.name}) where the "
                f"{spec.kind} growth changes the host"
            )
    return None
