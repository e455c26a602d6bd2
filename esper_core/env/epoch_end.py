"""The end of an epoch after its measurements arrive: slot measurements, governor
rollback, stage ticks, auto-advance and the reward (DOMAIN §5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from esper_core.components.reward import RewardContext
from esper_core.env import host_growth
from esper_core.env.apply import Applying, StepStart, record_fossilization, slot_snapshots
from esper_core.env.evaluation import EvalResult
from esper_core.env.events import SeedRecord, StepEvents
from esper_core.env.training import TrainStats
from esper_core.lifecycle import rules
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.run.telemetry import GovernorRollback

if TYPE_CHECKING:
    from esper_core.components.task import Task
    from esper_core.env.cost import CostMeter


class Ending(Applying, Protocol):
    """What the end of an epoch reads and writes of an env (``MorphogeneticEnv`` is one):
    what applying an action does (auto-advance fossilizes as an action would), the task
    and the epoch's cost (the reward's)."""

    @property
    def task(self) -> Task: ...

    @property
    def cost(self) -> CostMeter: ...


def record_measurements(model: MorphogeneticModel, train: TrainStats, ev: EvalResult) -> None:
    """Hand each slot its gradient statistics, its counterfactual contribution and its gain."""
    for slot in model.iter_slots():
        stats = train.seeds.get(slot.slot_id)
        if stats is not None:
            slot.state.record_gradients(
                stats.health, stats.exploding, stats.grad_ratio, stats.grad_norm
            )
        slot.state.record_contribution(
            ev.contributions.get(slot.slot_id), loss_finite=ev.finite and train.finite
        )
        slot.state.record_accuracy(ev.accuracy)


# SeedPruned.reason of a seed pruned because its output held an inf or NaN.
NONFINITE_REASON = "non_finite"
# SeedPruned / HostGrowthPruned.reason of what a governor rollback removed.
ROLLBACK_REASON = "rollback"


def prune_nonfinite(env: Ending, counts: dict[str, float], events: StepEvents) -> None:
    """Prune every live seed whose output held an inf or NaN this epoch.

    Isolation kept the host free of those values (see esper_core.lifecycle.isolation),
    so the host keeps its weights: no rollback on the seed's account.
    """
    pruned = False
    for slot in env.model.iter_slots():
        if counts.get(slot.slot_id, 0.0) > 0 and slot.stage in rules.PRUNABLE_STAGES:
            before = slot.stage
            events.pruned(slot.slot_id, before, SeedRecord.of(slot), NONFINITE_REASON)
            slot.prune()
            env.stats.n_pruned += 1
            events.stage_changed(slot, before)
            pruned = True
    if pruned:
        env.trainer.sync_optimizers()


def rollback(env: Ending, reason: str, loss: float, events: StepEvents) -> None:
    """Restore the governor's snapshot and prune every live seed, with their events."""
    live = {
        s.slot_id: (s.stage, SeedRecord.of(s))
        for s in env.model.iter_slots()
        if s.stage in rules.LIVE_STAGES
    }
    # The snapshot is of the host before any growth in flight; its events follow the
    # rollback's, as the seeds' do.
    growth_events = StepEvents(events.env, events.episode, events.epoch)
    host_growth.prune(env, growth_events, ROLLBACK_REASON)
    pruned = env.governor.rollback(env.model)
    env.trainer.reset_optimizers()
    env.stats.n_pruned += len(pruned)
    events.emit(
        GovernorRollback,
        reason=reason,
        val_loss=loss,
        penalty=env.config.governor.penalty,
        snapshot_epoch=env.governor.snapshot_epoch,
    )
    for slot_id in pruned:
        stage, seed = live[slot_id]
        events.pruned(slot_id, stage, seed, ROLLBACK_REASON)
        events.stage_changed(env.model.slot(slot_id), stage)
    events.events.extend(growth_events.events)


def tick_slots(model: MorphogeneticModel, events: StepEvents) -> None:
    """One epoch passes for every slot: stage counters, alpha ramps, cooldowns."""
    for slot in model.iter_slots():
        before = slot.stage
        slot.end_epoch()
        events.stage_changed(slot, before)


def auto_advance(env: Ending, accuracy: float, events: StepEvents) -> None:
    """Move every seed whose next gate passes: fossilize from HOLDING, else advance."""
    for slot in env.model.iter_slots():
        gate = slot.next_gate()
        if gate is None or not gate.passed:
            continue
        before = slot.stage
        events.gate(slot, gate)
        if rules.auto_advance_fossilizes(before):
            slot.fossilize(accuracy=accuracy)
            record_fossilization(env, slot, before, events)
        else:
            slot.advance(accuracy=accuracy)
            events.stage_changed(slot, before)


def reward_context(
    env: Ending, step: StepStart, ev: EvalResult, rolled_back: bool
) -> RewardContext:
    """What the reward family is shown of this epoch."""
    action, model, space = step.action, env.model, env.space
    targeted = action.op != LifecycleOp.WAIT and 0 <= action.slot < len(space.slot_ids)
    fossils_contributing = sum(
        1
        for s in model.iter_slots()
        if rules.is_fossil(s.stage)
        and (s.state.contribution or 0.0) >= env.config.env.fossil_contribution_points
    )
    return RewardContext(
        action=action,
        op=action.op,
        target_slot=space.slot_ids[action.slot] if targeted else None,
        applied=step.outcome.refused is None,
        epoch=env.epoch,
        max_epochs=env.max_epochs,
        val_acc_prev=step.eval_before.accuracy,
        val_acc=ev.accuracy,
        val_loss_prev=step.eval_before.loss,
        val_loss=ev.loss,
        slots_before=step.slots_before,
        slots_after=slot_snapshots(model),
        host_params=env.host_params,
        seed_params=model.seed_param_count(),
        fossil_params=model.fossil_param_count(),
        pruned_contribution=step.outcome.pruned_contribution,
        fossilized_contribution=step.outcome.fossilized_contribution,
        fossils_contributing=fossils_contributing,
        rolled_back=rolled_back,
        chance_loss=env.task.chance_loss,
        train_flops_ratio=env.cost.epoch_flops_ratio(),
        # The observation the action was chosen from: the last epoch's measurements.
        train_flops_ratio_prev=env.observation.train_flops_ratio,
    )
