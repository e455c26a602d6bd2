"""Applying the controller's action to the model, at the start of a step.

An illegal action (masked out) is refused and counted; a legal one whose gate fails
changes nothing and counts as a gate failure. Either way the step goes on: the epoch
trains, and the reward sees what happened through :class:`ActionOutcome`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from attrs import frozen

from esper_core.components.reward import SlotSnapshot
from esper_core.env import decision, host_growth_online
from esper_core.env.decision import StepDecision
from esper_core.env.evaluation import EvalResult
from esper_core.env.events import SeedRecord, StepEvents
from esper_core.env.growing import Requesting
from esper_core.env.init_seeds import init_seed
from esper_core.lifecycle.actions import Action, LifecycleOp, refusal_reason
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.views import by_name

if TYPE_CHECKING:
    from torch import nn

    from esper_core.components.blueprint import Blueprint
    from esper_core.env.episode import EpisodeStats
    from esper_core.step_values import Observation


class Applying(Requesting, Protocol):
    """What applying an action reads and writes of an env (``MorphogeneticEnv`` is one):
    a growth request's, the observation whose masks it obeys, and the episode's counts
    and last validation."""

    @property
    def stats(self) -> EpisodeStats: ...

    @property
    def last_eval(self) -> EvalResult: ...

    @property
    def observation(self) -> Observation: ...


@frozen
class ActionOutcome:
    refused: str | None  # illegal action or failed gate: why nothing happened
    illegal: bool
    pruned_contribution: float | None = None
    fossilized_contribution: float | None = None


APPLIED = ActionOutcome(refused=None, illegal=False)


@frozen
class StepStart:
    """The step so far: the action, what it did, and the state the reward compares to."""

    action: Action
    outcome: ActionOutcome
    slots_before: tuple[SlotSnapshot, ...]
    eval_before: EvalResult
    started: float  # perf_counter() when the step began
    events: StepEvents
    decision: StepDecision  # the action in words and its reason, the host's growth with them


def slot_snapshots(model: MorphogeneticModel) -> tuple[SlotSnapshot, ...]:
    return tuple(by_name(SlotSnapshot, r) for r in model.reports())


def stack_source(env: Applying, slot_id: str, blueprint: Blueprint) -> nn.Module | None:
    """The host block a stacking birth copies (``lifecycle.stack_blocks``): the one before
    the slot, where the blueprint can inherit it and the host names it (``block_before``)."""
    block_before = getattr(env.model.host, "block_before", None)
    if not env.config.lifecycle.stack_blocks or blueprint.inherit is None or block_before is None:
        return None
    block: nn.Module | None = block_before(slot_id)
    return block


def start_step(env: Applying, action: Action, events: StepEvents, started: float) -> StepStart:
    """Apply ``action`` (see :func:`apply`) and keep what the step's end compares to."""
    before = slot_snapshots(env.model)
    outcome = apply(env, action, events)
    return StepStart(
        action, outcome, before, env.last_eval, started, events, decision.describe(env, action)
    )


def apply(env: Applying, action: Action, events: StepEvents) -> ActionOutcome:
    """Apply ``action``, then start the host growth it asks for (if any): after the op, so
    a seed it germinates where the width would change is refused in one line rather than
    let into a slot the observation's masks did not yet close."""
    outcome = _apply_op(env, action, events)
    host_growth_online.request(env, action.host_growth, events)
    return outcome


def _apply_op(env: Applying, action: Action, events: StepEvents) -> ActionOutcome:
    """Apply the op if the observation's masks allow it; count refusals and failed gates."""
    reason = refusal_reason(action, env.observation.masks, env.space)
    if reason is not None:
        env.stats.n_refused += 1
        return ActionOutcome(refused=reason, illegal=True)
    outcome = APPLIED if action.op == LifecycleOp.WAIT else _apply_to_slot(env, action, events)
    if outcome.refused is not None:
        env.stats.n_gate_failures += 1
    return outcome


def _apply_to_slot(env: Applying, action: Action, events: StepEvents) -> ActionOutcome:
    op, space = action.op, env.space
    slot = env.model.slot(space.slot_ids[action.slot])
    before = slot.stage
    acc = env.last_eval.accuracy
    if op == LifecycleOp.GERMINATE:
        env.stats.n_germinated += 1
        blueprint = env.blueprints[space.blueprints[action.blueprint]]
        slot.germinate(
            f"{slot.slot_id}-s{env.stats.n_germinated}",
            blueprint,
            space.styles[action.style],
            tempo=space.tempos[action.tempo],
            epoch=env.epoch,
            accuracy=acc,
            init_seed=init_seed(env.seed, env.stats.n_germinated),
            source=stack_source(env, slot.slot_id, blueprint),
        )
        env.trainer.sync_optimizers()
        events.germinated(slot)
        events.stage_changed(slot, before)
        return APPLIED
    if op == LifecycleOp.ADVANCE:
        gate = slot.advance(accuracy=acc)
        events.gate(slot, gate)
        events.stage_changed(slot, before)
        return APPLIED if gate.passed else ActionOutcome(refused=gate.reason, illegal=False)
    if op == LifecycleOp.SET_ALPHA_TARGET:
        slot.set_alpha_target(space.alpha_targets[action.alpha_target], accuracy=acc)
        events.stage_changed(slot, before)
        return APPLIED
    if op == LifecycleOp.PRUNE:
        contribution = slot.state.contribution
        events.pruned(slot.slot_id, before, SeedRecord.of(slot, acc), "policy")
        slot.prune()
        env.trainer.sync_optimizers()
        env.stats.record_prune(env.epoch)
        events.stage_changed(slot, before)
        return ActionOutcome(refused=None, illegal=False, pruned_contribution=contribution)
    assert op == LifecycleOp.FOSSILIZE
    gate = slot.fossilize(accuracy=acc)
    events.gate(slot, gate)
    if not gate.passed:
        return ActionOutcome(refused=gate.reason, illegal=False)
    record_fossilization(env, slot, before, events)
    return ActionOutcome(
        refused=None, illegal=False, fossilized_contribution=slot.state.contribution
    )


def record_fossilization(env: Applying, slot: SeedSlot, before: Stage, events: StepEvents) -> None:
    """Bookkeeping of a fossilization (by action or auto-advance): events and a snapshot."""
    env.stats.n_fossilized += 1
    events.fossilized(slot)
    events.stage_changed(slot, before)
    env.governor.take_snapshot(env.model, env.epoch)
