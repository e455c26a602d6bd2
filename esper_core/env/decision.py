"""The decision an env records for an epoch: the action in words and its reason, with
what happens to the host itself at that epoch boundary.

A growth of the host changes the model as much as a seed's action does, but it rides
beside the op (``Action.host_growth``) or comes from a schedule, so the op alone read
``WAIT`` while the host widened. The words name the host's operator instead:
``WIDEN host x2`` (``DEEPEN host x2``) at the boundary its growth starts, asked by the
action or scheduled; ``WAIT`` with ``host widening, ramp 2/5`` leading the reason while
its ramp runs; ``FOLD host widening`` at the boundary it was folded into the host. They
are worked out when the action is applied, so the epoch event (``esper run``'s action
column, events.jsonl, the report) and the Grower's :attr:`decision` say the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from attrs import frozen

from esper_core.lifecycle.actions import Action, LifecycleOp
from esper_core.lifecycle.stages import Stage

if TYPE_CHECKING:
    from esper_core.lifecycle.actions import ActionSpace
    from esper_core.lifecycle.host_growth import HostGrowth
    from esper_core.lifecycle.model import MorphogeneticModel

# The word of each operator at its start, and while it runs.
VERBS = {"width": "WIDEN", "depth": "DEEPEN"}
NOUNS = {"width": "widening", "depth": "deepening"}


class Deciding(Protocol):
    """What describing a decision reads of an env (``MorphogeneticEnv`` is one)."""

    @property
    def space(self) -> ActionSpace: ...

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def epoch(self) -> int: ...

    @property
    def max_epochs(self) -> int: ...


@frozen
class StepDecision:
    """An epoch's decision as it is shown: ``action`` in words, and ``reason``."""

    action: str
    reason: str


def factor(growth: HostGrowth) -> float:
    """How many times as wide (the widest stage's ratio) or as deep the host grows."""
    return growth.scale()


def folded_at(growth: HostGrowth) -> int:
    """The boundary a fossilized growth was folded at: born before epoch b, it took a tick
    then and one at the end of every epoch, so its ``ticks``-th falls after epoch
    b + ticks - 2 (at birth when it has one)."""
    return growth.born_epoch + growth.schedule.ticks - 1


def describe(env: Deciding, action: Action) -> StepDecision:
    """``action`` as applied for the epoch ``env.epoch`` (its host growth already
    started), with what the host does at this boundary."""
    words = env.space.describe(action)
    waits = action.op == LifecycleOp.WAIT
    notes: list[str] = []
    for growth in env.model.host_growths:
        noun = NOUNS[growth.operator]
        ramp = f"{growth.schedule.step}/{growth.schedule.ticks}"
        if growth.stage == Stage.PRUNED:
            continue  # a rollback's: its event says so at the boundary it happened
        if growth.born_epoch == env.epoch:
            start = f"{VERBS[growth.operator]} host x{factor(growth):g}"
            words = start if waits else f"{words} + {start}"
            if action.host_growth is None:  # not the action's request: the schedule's
                notes.append("on schedule")
            if not growth.in_flight:
                notes.append(f"folded at once (tempo {growth.schedule.ticks})")
        elif growth.in_flight:
            notes.append(f"host {noun}, ramp {ramp}")
        elif folded_at(growth) == env.epoch:
            if waits:
                words = f"FOLD host {noun}"
                notes.append(f"ramp {ramp} done, folded into the host")
            else:
                notes.append(f"host {noun} folded, ramp {ramp} done")
    return StepDecision(words, "; ".join([*notes, action.reason] if action.reason else notes))


def finished(env: Deciding) -> StepDecision:
    """The decision once the env's ``max_epochs`` are done: none follows."""
    reason = f"the {env.max_epochs} planned epochs (max_epochs) are done"
    growth = env.model.host_growth
    if growth is not None:
        noun = NOUNS[growth.operator]
        ramp = f"{growth.schedule.step}/{growth.schedule.ticks}"
        reason += f"; the host {noun} stays at ramp {ramp}, alpha {growth.alpha:.2f}"
    return StepDecision("DONE", reason)
