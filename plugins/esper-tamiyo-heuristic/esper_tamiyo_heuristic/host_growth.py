"""The heuristic's growth of the host itself (``host_growth``), once per episode, at the
moment the validation loss says the host alone has slowed down, or at once
(``host_growth_drop`` 1, the default) while the host still underfits (``GrowsHostOnline``).

It asks only when the env can honour the request, so a request is never refused: in
the window ``host_growth_min_at`` .. ``host_growth_max_at`` of the run, not after it
asked once, and when the env says the growth can start (``Observation.host_growth_ready``,
:mod:`esper_core.env.host_growth_ready`: no growth in flight, no seed where the growth
changes the host, not at the last epoch). Until it has grown, or its window has closed,
no seed germinates, so only a seed installed at birth can be in the way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import evolve

from esper_core.components.host_growth_choice import choose, ready
from esper_core.components.host_growth_options import growth_request
from esper_core.lifecycle.rules import LIVE_STAGES
from esper_core.lifecycle.stages import Stage
from esper_tamiyo_heuristic.memory import Decision, EnvMemory
from esper_tamiyo_heuristic.options import HeuristicOptions
from esper_tamiyo_heuristic.signals import Trigger, capacity_check, fit_gate, train_signal

if TYPE_CHECKING:
    from esper_core.components.policy import HostGrowthSpec
    from esper_core.env.observation import Observation


def spec(o: HeuristicOptions, at: float, kind: str = "") -> HostGrowthSpec | None:
    """The growth ``o`` asks for, starting at ``at``; None when ``host_growth`` is off.
    ``kind``: what auto chose (:func:`choose`)."""
    return growth_request(o, at, kind)


def window(o: HeuristicOptions, max_epochs: int) -> tuple[int, int]:
    """The first and last epoch a growth may start at (as a schedule's ``at`` rounds)."""
    return round(o.host_growth_min_at * max_epochs), round(o.host_growth_max_at * max_epochs)


def pending(o: HeuristicOptions, memory: EnvMemory, obs: Observation) -> bool:
    """Whether the host may still grow this episode (germination waits for it)."""
    # No growth declared on this env (its host cannot take it): seeds alone.
    if o.host_growth == "off" or memory.host_growth_epoch >= 0 or not obs.host_growth_ready:
        return False
    return obs.epoch <= window(o, obs.max_epochs)[1]


def trigger(o: HeuristicOptions, obs: Observation) -> Trigger:
    """The validation loss fell by less than ``host_growth_drop`` of itself per epoch over
    the last ``host_growth_window`` epochs (from 1 on, any fall does: at once)."""
    at_once = o.host_growth_drop >= 1
    check = capacity_check(
        obs.loss_history,
        obs.chance_loss,
        loss_ratio=0.0,
        window=o.host_growth_window,
        max_drop=o.host_growth_drop,
        signal="validation loss",
        limit="slowed down",
    )
    if not (at_once and check.fired):
        return check
    # "falls 1.7%/epoch < 100%" is true of every falling loss, so at once the reason a
    # user can act on is the fit gate's: the host has not fitted its training data yet.
    return Trigger(True, f"at once (host_growth_drop {o.host_growth_drop:g}): {_underfits(o, obs)}")


def _underfits(o: HeuristicOptions, obs: Observation) -> str:
    """Why the fit gate is open, in the user's terms."""
    if o.fit_loss_ratio <= 0:
        return "no fit gate (fit_loss_ratio 0)"
    return (
        f"the host still underfits: {train_signal(obs)} {obs.train_loss:.3f} >= "
        f"fit_loss_ratio={o.fit_loss_ratio:g} x chance {obs.chance_loss:.3f}"
    )


def with_host_growth(
    o: HeuristicOptions, memory: EnvMemory, obs: Observation, decision: Decision
) -> Decision:
    """``decision``, asking for the host growth too when its moment has come (then
    remembered), or with why it has not come added to a WAIT's reason."""
    from esper_core.lifecycle.actions import LifecycleOp

    if not pending(o, memory, obs):
        return decision
    first, last = window(o, obs.max_epochs)
    why = ""
    fired = None
    kind, chose = choose(o, obs)
    if obs.epoch < first:
        why = f"no host growth before epoch {first} (host_growth_min_at)"
    elif not ready(obs, kind):
        why = f"no host growth: the env says it cannot start now{_seeds_held(obs)}"
    elif decision.action.op != LifecycleOp.WAIT:  # a seed's own action goes first
        why = "no host growth with a seed action"
    else:
        closed = fit_gate(obs.train_loss, obs.chance_loss, o.fit_loss_ratio, train_signal(obs))
        fired = closed or trigger(o, obs)
        why = f"host growth: {fired.why}"
    if fired is None or not fired.fired:
        if decision.rule != "wait":
            return decision
        return evolve(decision, reason="; ".join(r for r in (decision.reason, why) if r))
    request = spec(o, obs.epoch / obs.max_epochs, kind)
    memory.host_growth_epoch = obs.epoch
    # The env's decision line names the operator and its size (WIDEN host x2): the
    # reason says why now (and, for auto, why this one).
    return Decision(
        evolve(decision.action, host_growth=request),
        "host_growth",
        "; ".join(
            r for r in (f"epoch {obs.epoch} in its window {first}-{last}: {fired.why}", chose) if r
        ),
    )


def _seeds_held(obs: Observation) -> str:
    """The seeds a refused growth may be waiting on, live ones apart from kept ones (the
    shipped operators grow around a kept seed; an operator that cannot keep one waits)."""
    live = [r.slot_id for r in obs.slots if r.stage in LIVE_STAGES]
    kept = [r.slot_id for r in obs.slots if r.stage == Stage.FOSSILIZED]
    parts = [f"{', '.join(live)} holds a live seed"] if live else []
    parts += [f"{', '.join(kept)} a kept one"] if kept else []
    return f" ({'; '.join(parts)})" if parts else ""
