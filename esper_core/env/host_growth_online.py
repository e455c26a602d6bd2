"""Host growth a policy asks for while the run goes on (``GrowsHostOnline``).

The request travels with the action (``Action.host_growth``), so every executor and loop
delivers it as it delivers the action, and it starts before the epoch that action
trains. It starts when :mod:`esper_core.env.host_growth_ready` says it can (the checks
a scheduled growth passes, no growth in flight, no seed in its way, not at the last
epoch) and as a scheduled growth does (:func:`host_growth.start_spec`): the same
lifecycle, ramp, fold and governor rollback, and the same
:class:`~esper_core.env.host_growth.GrowthRecord` with its epoch, which a checkpoint
replays. Each observation says, per growth the policy declared, whether it can start
(``Observation.host_growth_ready``), so a policy masks by the rule the env refuses by: a
request the env cannot honour is a ConfigError, as a policy that asks anyway is
misconfigured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from esper_core.components.policy import HostGrowthSpec
from esper_core.env.host_growth import check_specs, operator_for, start_spec
from esper_core.env.host_growth_ready import blocked
from esper_core.errors import ConfigError
from esper_core.lifecycle.host_growth import GrowthError

if TYPE_CHECKING:
    from esper_core.env.growing import GrowthEvents, Requesting


def _who(env: Requesting) -> str:
    return f"run.policy {env.config.run.policy!r}: its host growth request"


def request(env: Requesting, spec: HostGrowthSpec | None, events: GrowthEvents) -> None:
    """Start ``spec`` (an action's ``host_growth``; None: nothing asked) before this epoch."""
    if spec is None:
        return
    who = _who(env)
    epoch = spec.epoch(env.max_epochs)
    if epoch != env.epoch:
        raise ConfigError(
            [
                f"{who} names epoch {epoch} (at {spec.at:g}) in the action of epoch "
                f"{env.epoch}; a request starts before the epoch its action trains: set "
                f"at = {env.epoch}/{env.max_epochs}"
            ]
        )
    why = blocked(env, spec)
    if why is not None:
        raise ConfigError([f"{who} at epoch {env.epoch}: {why}"])
    start_spec(env, spec, events, who)


def where_possible(policy: object) -> bool:
    """Whether ``policy`` grows the host only where the host takes it (its
    ``host_growth_where_possible``): a host that cannot grow so is then trained without
    host growth instead of refused."""
    return bool(getattr(policy, "host_growth_where_possible", False))


def check_declared(
    envs: Sequence[Any], specs: Sequence[HostGrowthSpec], *, optional: bool = False
) -> str | None:
    """Refuse, before the run starts, a growth the policy may ask for that the host cannot
    take (its shape, the factor, the mode): every env of a run has the same host. Each
    env then observes whether each of them can start (``host_growth_ready``, with their
    kinds in ``host_growth_kinds``). ``optional`` (:func:`where_possible`): a growth of a
    kind no operator of the host provides is not refused but left out (its envs declare
    only the others, or none), and the reason is returned. A size or mode the host's
    operator refuses is refused either way."""
    # Another rank's env is a stand-in without a model; this rank's own envs have one.
    own = [e for e in envs if getattr(e, "model", None) is not None]
    if not own:
        return None
    env = own[0]
    policy = env.config.run.policy
    why = None
    if optional:
        # Only a kind of growth no operator provides is let off; a size or mode the
        # host's operator refuses is still the user's setting to fix.
        kept, left_out = [], []
        for spec in specs:
            try:
                operator_for(env.operators, env.model.host, spec.kind, spec.operator)
                kept.append(spec)
            except GrowthError as exc:
                left_out.append(str(exc))
        specs = kept
        if left_out:
            why = f"run.policy {policy!r} may grow the host so: {'; '.join(left_out)}"
    try:
        for spec in specs:
            check_specs([attrs.evolve(spec, at=0.0)], env)
    except ConfigError as exc:
        raise ConfigError(
            [f"run.policy {policy!r} may grow the host so: {p}" for p in exc.problems]
        ) from None
    for e in own:
        e.online_growth_specs = tuple(specs)
    return why
