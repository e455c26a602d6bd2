"""When the heuristic germinates, which blueprint where, and why an episode grew nothing
(rule 5 of ``heuristic``). Plain functions of the options, the env's memory and the
observation, so the policy class keeps only the rule order and its memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from esper_core.lifecycle.rules import LIVE_STAGES, epochs_to_full_alpha
from esper_tamiyo_heuristic import host_growth
from esper_tamiyo_heuristic.memory import Decision, EnvMemory
from esper_tamiyo_heuristic.options import HeuristicOptions
from esper_tamiyo_heuristic.signals import (
    Trigger,
    capacity_check,
    expansion_check,
    fit_gate,
    train_signal,
)

if TYPE_CHECKING:
    from esper_core.env.observation import Observation
    from esper_core.lifecycle.actions import ActionSpace


def trigger(o: HeuristicOptions, memory: EnvMemory, obs: Observation) -> Trigger:
    """The trigger and its numbers: the host underfits on a flat training curve
    (``trigger = capacity``), or its validation loss falls by less than
    ``slowdown_drop`` per epoch (``trigger = slowdown``, the compute-aware recipe:
    more epochs of this model buy little, so grow now rather than at the end). Whatever
    the trigger, nothing germinates while the host fits its training data
    (``fit_loss_ratio``)."""
    closed = fit_gate(obs.train_loss, obs.chance_loss, o.fit_loss_ratio, train_signal(obs))
    if closed is not None:
        return closed
    if o.trigger == "expansion":
        return sustained(expansion_check(obs, o.expansion_ratio), memory, obs.epoch, o)
    if o.trigger == "slowdown":
        return capacity_check(
            obs.loss_history,
            obs.chance_loss,
            loss_ratio=0.0,
            window=o.flat_window,
            max_drop=o.slowdown_drop,
            signal="validation loss",
            limit="slowed down",
        )
    return capacity_check(
        memory.train_losses,
        obs.chance_loss,
        loss_ratio=o.underfit_loss_ratio,
        window=o.flat_window,
        max_drop=o.flat_max_drop,
    )


def sustained(fired: Trigger, memory: EnvMemory, epoch: int, o: HeuristicOptions) -> Trigger:
    """``fired`` once it has held at ``expansion_patience`` consecutive decisions (epochs
    in a row): the probe reads a few batches of a model still moving, and one high reading
    is not yet a bottleneck. A decision that skips the trigger (a live seed, a cooldown)
    breaks the run."""
    if not fired.fired:
        memory.expansion_streak = 0
        return fired
    consecutive = memory.expansion_epoch == epoch - 1
    memory.expansion_streak = memory.expansion_streak + 1 if consecutive else 1
    memory.expansion_epoch = epoch
    if memory.expansion_streak < o.expansion_patience:
        return Trigger(
            False,
            f"{fired.why}, at {memory.expansion_streak} of {o.expansion_patience} decisions "
            "in a row (expansion_patience)",
        )
    return fired


def epochs_to_judge(o: HeuristicOptions, obs: Observation, blueprint: int, tempo: int) -> int:
    """Epochs from a germination of ``blueprint`` at ``tempo`` until its seed can be judged."""
    before = obs.epochs_before_blending[blueprint] if obs.epochs_before_blending else 0
    return epochs_to_full_alpha(before, tempo) + o.min_holding_epochs


def next_blueprint(order: Sequence[str], memory: EnvMemory, epoch: int) -> str | None:
    """The next blueprint of the rotation ``order`` that is not penalised at ``epoch``."""
    for step in range(len(order)):
        key = order[(memory.rotation + step) % len(order)]
        if memory.penalties.get(key, 0) <= epoch:
            return key
    return None


def germination(
    o: HeuristicOptions,
    memory: EnvMemory,
    obs: Observation,
    *,
    space: ActionSpace,
    order: Sequence[str],
    style_index: int,
    tempo_index: int,
) -> Decision | str:
    """The germination the trigger asks for, or why there is none."""
    from esper_core.lifecycle.actions import Action, LifecycleOp

    if any(r.stage in LIVE_STAGES for r in obs.slots):
        return ""  # one seed at a time: the live seed's own note says why it waits
    if host_growth.pending(o, memory, obs):
        return "no germination before the host grows (host_growth)"
    if obs.epoch < o.min_epoch:
        return f"no germination before epoch {o.min_epoch} (min_epoch)"
    if obs.epochs_since_prune < o.prune_cooldown:
        return (
            f"no germination {obs.epochs_since_prune} epoch(s) after a prune "
            f"(prune_cooldown {o.prune_cooldown})"
        )
    memory.trigger_asked = True
    fired = trigger(o, memory, obs)
    if not fired.fired:
        return fired.why
    legal_slots = obs.masks.slot[LifecycleOp.GERMINATE].tolist()
    if not bool(obs.masks.op[LifecycleOp.GERMINATE]) or not any(legal_slots):
        return f"{fired.why}, but no slot may take a seed now (env.max_seeds, stages)"
    key = next_blueprint(order, memory, obs.epoch)
    if key is None:
        return f"{fired.why}, but every blueprint was pruned recently (blueprint_penalty_epochs)"
    blueprint = space.blueprints.index(key)
    # The first slot where this blueprint can grow (a branch needs a following segment).
    legal_slots = [
        ok and fit for ok, fit in zip(legal_slots, obs.masks.blueprint[:, blueprint].tolist())
    ]
    if not any(legal_slots):
        return f"{fired.why}, but {key} fits no free slot"
    left = obs.max_epochs - obs.epoch
    needed = epochs_to_judge(o, obs, blueprint, space.tempos[tempo_index])
    if left < needed:
        if not memory.late_trigger:
            memory.late_trigger = [obs.epoch, left, needed]
        # It could not be judged, let alone kept, before the episode ends.
        return f"{fired.why}, but {left} epoch(s) left < {needed} to blend and judge a seed"
    slot = best_slot(legal_slots, obs.expansion if o.trigger == "expansion" else ())
    action = Action(
        LifecycleOp.GERMINATE,
        slot=slot,
        blueprint=blueprint,
        style=style_index,
        tempo=tempo_index,
    )
    return Decision(action, "germinate", f"{space.slot_ids[slot]}: {key}: {fired.why}")


def best_slot(legal: Sequence[bool], scores: Sequence[float]) -> int:
    """The legal slot with the highest expansion score; the first legal one without
    scores (the rotation's order)."""
    if len(scores) != len(legal):
        return list(legal).index(True)
    ranked = [(score if math.isfinite(score) else -math.inf, -i) for i, score in enumerate(scores)]
    return -max(r for r, ok in zip(ranked, legal) if ok)[1]


def why_no_growth(o: HeuristicOptions, memory: EnvMemory | None) -> str | None:
    """Why an episode with this memory germinated nothing, in one clause (the run
    summary and ``esper compare`` show it); None when it made no decision."""
    if memory is None or memory.host_growth_epoch >= 0:  # it grew the host instead
        return None
    if memory.late_trigger:
        epoch, left, needed = memory.late_trigger
        return (
            f"the heuristic's trigger first fired at epoch {epoch} with {left} epochs left, "
            f"and a seed needs {needed} to blend and be judged: raise env.max_epochs"
        )
    if not memory.trigger_asked:
        return (
            f"the episode ended before the heuristic could germinate (it waits for "
            f"min_epoch={o.min_epoch}, no live seed and prune_cooldown={o.prune_cooldown} "
            "epochs after a prune): raise env.max_epochs"
        )
    if o.trigger == "expansion":
        return (
            "the heuristic's trigger never fired: no free slot's expansion score reached "
            f"expansion_ratio={o.expansion_ratio} x the host's"
        )
    if o.trigger == "slowdown":
        return (
            "the heuristic's trigger never fired: the validation loss kept falling by more "
            f"than slowdown_drop={o.slowdown_drop} of itself per epoch"
        )
    return (
        "the heuristic's trigger never fired: the host showed no capacity limit (training "
        f"loss at least underfit_loss_ratio={o.underfit_loss_ratio} x chance and falling "
        f"less than flat_max_drop={o.flat_max_drop} per epoch over flat_window="
        f"{o.flat_window} epochs)"
    )
