"""``policies.heuristic``: the rule-based Tamiyo that grows only where it pays.

Once per epoch and env it takes the first rule that yields a legal action:

1. Judge a HOLDING seed (after ``min_holding_epochs`` at alpha 1): ``judge =
   contribution`` (default, ``judgement``) keeps it once the model is ``min_contribution``
   points better with it than switched off; ``judge = gain``, by its measured
   *gain*: how much lower the validation loss is than the host alone was heading for
   (the trend before the seed touched the output, extrapolated), as a fraction of the
   loss then. It must pay for its parameters: ``min_gain`` plus ``gain_per_doubling``
   for every doubling of the model's parameters. Fossilize when it does and its gate
   G5 passes (``price = flops``: for every doubling of the training FLOPs per epoch
   instead, the compute-aware price); a seed short of its price whose gain is still
   rising waits (up to ``max_holding_epochs`` in HOLDING), otherwise it is pruned;
   prune a paying seed whose G5 still fails after ``max_holding_epochs``.
2. Regression: prune a BLENDING seed once validation accuracy has been more than
   ``regression_points`` below its value at the start of the stage, after
   ``regression_epochs`` in the stage (a TRAINING seed cannot change the output, so a
   drop then is the host's own noise).
3. Stall: prune a seed that has spent ``stall_epochs`` in TRAINING or BLENDING.
4. Advance a seed whose next gate (``Observation.gates``) passes.
5. Germinate when the trigger fires: ``trigger = expansion`` (default), a free slot's
   expansion score reaches ``expansion_ratio`` (the seed goes to the best slot);
   ``trigger = capacity``, the host shows a capacity limit (training loss still at least ``underfit_loss_ratio`` x chance and
   falling less than ``flat_max_drop`` per epoch over ``flat_window`` epochs);
   ``trigger = slowdown`` (the compute-aware recipe: train small while that pays, grow
   when it stops paying), the validation loss fell by less than ``slowdown_drop`` per
   epoch over ``flat_window`` epochs. Also: no other seed is live (one seed is judged
   at a time), at least ``min_epoch`` epochs are done, the last prune is
   ``prune_cooldown`` epochs ago and the seed can finish its lifecycle (blend, reach
   alpha 1 and be judged) before the episode ends. The blueprint is the next one of
   ``blueprint_order`` (rotating), skipping any whose seed was pruned in the last
   ``blueprint_penalty_epochs`` epochs; the slot is the first one where it is legal.
6. Otherwise WAIT.

Every action carries its reason (``Action.reason``): the rule that chose it with the
numbers it read, and for WAIT why nothing fired (each live seed's state, then why no
seed is germinated: the trigger's numbers, ``min_epoch``, the cooldown, the masks).

Every candidate is checked against ``Observation.masks`` with
``esper_core.lifecycle.actions.refusal_reason``; an illegal one is skipped, never sent.
Memory (rotation, penalties, live seeds last seen, the training losses, each seed's
baseline) is kept per env, keyed by ``Observation.env_index``, and is part of the state
dict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import evolve

from esper_core import hookimpl
from esper_core.components.host_growth_choice import declared
from esper_core.converter import structure, unstructure
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.rules import (
    ADVANCE_TARGET,
    LIVE_STAGES,
    SEED_STAGES,
    WATCHED_STAGES,
)
from esper_core.lifecycle.stages import Stage
from esper_tamiyo_heuristic import germination, host_growth, judgement
from esper_tamiyo_heuristic.memory import Decision, EnvMemory, SeenSeed, resolve_blueprint_order
from esper_tamiyo_heuristic.options import HeuristicOptions
from esper_tamiyo_heuristic.signals import (
    Trigger,
    baseline_of,
    gain_text,
    relative_gain,
    required_gain,
)

if TYPE_CHECKING:
    from esper_core.components.policy import HostGrowthSpec, PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action, ActionSpace
    from esper_core.lifecycle.slot_state import SlotReport

STATE_VERSION = 2


class HeuristicPolicy:
    """Rule-based Tamiyo; see the module docstring for the rules in priority order."""

    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = (
        "Rules: germinate where the host's gradients say new capacity pays, keep seeds the "
        "model is measurably better with, prune the rest"
    )
    Options: ClassVar[type] = HeuristicOptions
    host_growth_where_possible: ClassVar[bool] = True  # a host that cannot: seeds alone

    def __init__(self, options: HeuristicOptions, context: PolicyContext) -> None:
        self.options = options
        self.context = context
        space = context.space
        problems = []
        if options.style not in space.styles:
            problems.append(
                f"policies.heuristic.style: {options.style!r} is not one of this run's "
                f"lifecycle.styles ({', '.join(space.styles)})"
            )
        if options.tempo not in space.tempos:
            problems.append(
                f"policies.heuristic.tempo: {options.tempo} is not one of this run's "
                f"lifecycle.tempos ({', '.join(str(t) for t in space.tempos)})"
            )
        if context.history_length < options.gain_window + 1:
            problems.append(
                f"policies.heuristic.gain_window: {options.gain_window} needs "
                f"env.history_length >= {options.gain_window + 1}, got {context.history_length}"
            )
        if options.host_growth != "off" and context.history_length < options.host_growth_window + 1:
            problems.append(
                f"policies.heuristic.host_growth_window: {options.host_growth_window} needs "
                f"env.history_length >= {options.host_growth_window + 1}, got "
                f"{context.history_length}"
            )
        if problems:
            raise ConfigError(problems)
        self.style_index = space.styles.index(options.style)
        self.tempo_index = space.tempos.index(options.tempo)
        self.blueprint_order = resolve_blueprint_order(options.blueprint_order, space.blueprints)
        self.memory: dict[int, EnvMemory] = {}

    @property
    def space(self) -> ActionSpace:
        return self.context.space

    # ------------------------------------------------------------ protocol

    def reset(self, env_indices: Sequence[int]) -> None:
        for index in env_indices:
            self.memory.pop(int(index), None)

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        return [self.decide(obs).action for obs in observations]

    def observe(self, results: Sequence[StepResult]) -> None:
        """Nothing to learn: prunes (the policy's own and the governor's) are read from
        the next observation, where they are certain."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "memory": {index: unstructure(memory) for index, memory in self.memory.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            if state["version"] != STATE_VERSION:
                raise ValueError(f"state version {state['version']!r}, expected {STATE_VERSION}")
            memory = {
                int(index): structure(data, EnvMemory) for index, data in state["memory"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError, ConfigError) as exc:
            raise CheckpointError(
                f"the heuristic policy's saved state is not one it wrote ({type(exc).__name__}: {exc}); "
                "resume the run with the policy that wrote the checkpoint"
            ) from None
        self.memory = memory

    def online_host_growths(self) -> list[HostGrowthSpec]:
        """The host growths it may ask for (``GrowsHostOnline``; off: none; auto: both)."""
        return declared(self.options)

    def why_no_growth(self, env_index: int) -> str | None:
        """Why this env's episode germinated nothing (``germination.why_no_growth``)."""
        return germination.why_no_growth(self.options, self.memory.get(int(env_index)))

    # ------------------------------------------------------------ memory

    def decide(self, obs: Observation) -> Decision:
        """Choose the action for one env and update that env's memory."""
        memory = self.memory.setdefault(obs.env_index, EnvMemory())
        self._note_removed_seeds(memory, obs)
        self._note_epoch(memory, obs)
        decision = host_growth.with_host_growth(
            self.options, memory, obs, self._choose(memory, obs)
        )
        decision = evolve(decision, action=decision.action.because(decision.reason))
        if decision.rule == "germinate":
            key = self.space.blueprints[decision.action.blueprint]
            memory.rotation = (self.blueprint_order.index(key) + 1) % len(self.blueprint_order)
            memory.flops_before_growth = obs.train_flops_ratio
        return decision

    def _note_removed_seeds(self, memory: EnvMemory, obs: Observation) -> None:
        """Penalise the blueprint of every seed that was live at the last decision and is
        gone now (pruned by this policy or by a governor rollback); remember live seeds."""
        by_slot = {r.slot_id: r for r in obs.slots}
        for slot_id, seen in memory.seen.items():
            report = by_slot.get(slot_id)
            kept = (
                report is not None
                and report.seed_id == seen.seed_id
                and report.stage in SEED_STAGES
            )
            if not kept:
                memory.penalties[seen.blueprint] = obs.epoch + self.options.blueprint_penalty_epochs
        memory.penalties = {k: until for k, until in memory.penalties.items() if until > obs.epoch}
        memory.seen = {
            r.slot_id: SeenSeed(r.seed_id, r.blueprint)
            for r in obs.slots
            if r.stage in LIVE_STAGES and r.seed_id is not None and r.blueprint is not None
        }

    def _note_epoch(self, memory: EnvMemory, obs: Observation) -> None:
        """Keep the last training losses, and each seed's baseline from the validation
        losses of the epochs before it first touched the output."""
        if obs.epoch > memory.last_epoch:
            memory.train_losses.append(obs.train_loss)
            del memory.train_losses[: -(self.options.flat_window + 1)]
            memory.last_epoch = obs.epoch
        live = {r.seed_id for r in obs.slots if r.seed_id is not None}
        memory.baselines = {k: v for k, v in memory.baselines.items() if k in live}
        memory.gains = {k: v for k, v in memory.gains.items() if k in live}
        for r in obs.slots:
            if r.seed_id is None or r.seed_id in memory.baselines:
                continue
            if r.stage == Stage.BLENDING:
                blended = r.epochs_in_stage
                pre = obs.loss_history[:-blended] if blended else obs.loss_history
                window = self.options.gain_window
                memory.baselines[r.seed_id] = baseline_of(pre, obs.epoch - blended, window)
            elif r.stage == Stage.HOLDING:
                memory.baselines[r.seed_id] = None  # blended unseen: no baseline to judge by

    # ------------------------------------------------------------ rules

    def _choose(self, memory: EnvMemory, obs: Observation) -> Decision:
        candidates, waiting = self._candidates(memory, obs)
        for candidate in candidates:
            if self._legal(candidate.action, obs):
                return candidate
        from esper_core.lifecycle.actions import WAIT

        skipped = [f"{c.reason} (not legal now)" for c in candidates]
        notes = [*skipped, *(w for w in waiting if w)]
        return Decision(WAIT, "wait", "; ".join(notes) or "no rule applies")

    def _legal(self, action: Action, obs: Observation) -> bool:
        from esper_tamiyo_heuristic.legal import is_legal

        return is_legal(action, obs.masks, self.space)

    def _candidates(self, memory: EnvMemory, obs: Observation) -> tuple[list[Decision], list[str]]:
        """Every action a rule suggests now, in priority order (legality checked later),
        and why the rules that suggest nothing wait (each live seed, then growth)."""
        out: list[Decision] = []
        waiting: list[str] = []
        for i, r in enumerate(obs.slots):
            judged = self._judge(memory, obs, i, r)
            if isinstance(judged, Decision):
                out.append(judged)
            elif judged is not None:
                waiting.append(judged)
        for i, r in enumerate(obs.slots):
            removal = self._regression_or_stall(obs, i, r)
            if removal is not None:
                out.append(removal)
        for i, r in enumerate(obs.slots):
            gate = obs.gates[i] if i < len(obs.gates) else None
            if r.stage in ADVANCE_TARGET and gate is not None and gate.passed:
                out.append(self._on_slot("ADVANCE", i, "advance", f"{r.slot_id}: {gate.reason}"))
        germinate = self._germination(memory, obs)
        if isinstance(germinate, Decision):
            out.append(germinate)
        else:
            waiting.append(germinate)
        return out, waiting

    def _on_slot(self, op: str, slot: int, rule: str, reason: str) -> Decision:
        from esper_core.lifecycle.actions import Action, LifecycleOp

        return Decision(Action(LifecycleOp[op], slot=slot), rule, reason)

    def gain(self, memory: EnvMemory, obs: Observation, report: SlotReport) -> float | None:
        """The seed's measured gain now (see ``signals.relative_gain``); None: no baseline."""
        base = memory.baselines.get(report.seed_id or "")
        if base is None:
            return None
        return relative_gain(base, obs.loss_history, obs.epoch, self.options.gain_window)

    def price(self, memory: EnvMemory, obs: Observation, report: SlotReport) -> float:
        """The gain the seed must show to pay for its parameters (``price = params``) or
        for its training FLOPs per epoch (``price = flops``)."""
        o = self.options
        if o.price == "flops":
            before, after = memory.flops_before_growth, obs.train_flops_ratio
            return required_gain(o.min_gain, o.gain_per_doubling, before, after)
        after = obs.host_params + obs.seed_params
        return required_gain(o.min_gain, o.gain_per_doubling, after - report.seed_params, after)

    def _judge(
        self, memory: EnvMemory, obs: Observation, i: int, r: SlotReport
    ) -> Decision | str | None:
        """A HOLDING seed's verdict, or why a live seed waits (None: no live seed)."""
        o = self.options
        if r.stage not in LIVE_STAGES:
            return None
        if r.stage != Stage.HOLDING:
            gate = obs.gates[i] if i < len(obs.gates) else None
            why = f", {gate.reason}" if gate is not None and not gate.passed else ""
            return f"{r.slot_id}: {r.stage.value} for {r.epochs_in_stage} epoch(s){why}"
        if r.epochs_in_stage < o.min_holding_epochs:
            return (
                f"{r.slot_id}: HOLDING {r.epochs_in_stage} of {o.min_holding_epochs} "
                "epochs before it is judged"
            )
        if o.judge == "contribution":
            gate = obs.gates[i] if i < len(obs.gates) else None
            return judgement.by_contribution(o, i, r, gate, self._on_slot)
        gain, need = self.gain(memory, obs, r), self.price(memory, obs, r)
        if gain is None or gain < need:
            shown = gain_text(gain, "<", need)
            last = memory.gains.get(r.seed_id or "")
            memory.gains[r.seed_id or ""] = -math.inf if gain is None else gain
            rising = gain is not None and (last is None or gain > last)
            if rising and r.epochs_in_stage < o.max_holding_epochs:
                # Still climbing: it has until max_holding_epochs to pay.
                return (
                    f"{r.slot_id}: {shown} but rising "
                    f"({r.epochs_in_stage} of {o.max_holding_epochs} epochs in HOLDING)"
                )
            return self._on_slot("PRUNE", i, "prune_gain", f"{r.slot_id}: {shown}")
        gate = obs.gates[i] if i < len(obs.gates) else None
        if gate is not None and gate.passed:
            return self._on_slot(
                "FOSSILIZE", i, "fossilize", f"{r.slot_id}: {gain_text(gain, '>=', need)}"
            )
        if r.epochs_in_stage >= o.max_holding_epochs:
            why = gate.reason if gate is not None else "no gate"
            return self._on_slot(
                "PRUNE",
                i,
                "prune_gate",
                f"{r.slot_id}: {why} after {r.epochs_in_stage} epochs in HOLDING",
            )
        why = gate.reason if gate is not None else "no gate"
        return f"{r.slot_id}: {gain_text(gain, '>=', need)}, waiting for its gate ({why})"

    def _regression_or_stall(self, obs: Observation, i: int, r: SlotReport) -> Decision | None:
        o = self.options
        if r.stage == Stage.BLENDING and r.epochs_in_stage >= o.regression_epochs:
            drop = obs.val_acc - r.acc_at_stage_start
            if drop < -o.regression_points:
                return self._on_slot(
                    "PRUNE",
                    i,
                    "prune_regression",
                    f"{r.slot_id}: accuracy {drop:+.2f} points since {r.stage.value} began",
                )
        if r.stage in WATCHED_STAGES and r.epochs_in_stage >= o.stall_epochs:
            return self._on_slot(
                "PRUNE",
                i,
                "prune_stall",
                f"{r.slot_id}: {r.epochs_in_stage} epochs in {r.stage.value}",
            )
        return None

    def growth_triggered(self, memory: EnvMemory, obs: Observation) -> bool:
        """Whether the trigger fires (see :meth:`trigger`)."""
        return self.trigger(memory, obs).fired

    def trigger(self, memory: EnvMemory, obs: Observation) -> Trigger:
        """The trigger and its numbers (``germination.trigger``)."""
        return germination.trigger(self.options, memory, obs)

    def epochs_to_judge(self, obs: Observation, blueprint: int) -> int:
        """Epochs from a germination of ``blueprint`` until its seed can be judged."""
        tempo = self.space.tempos[self.tempo_index]
        return germination.epochs_to_judge(self.options, obs, blueprint, tempo)

    def _germination(self, memory: EnvMemory, obs: Observation) -> Decision | str:
        """The germination the trigger asks for, or why there is none."""
        return germination.germination(
            self.options,
            memory,
            obs,
            space=self.space,
            order=self.blueprint_order,
            style_index=self.style_index,
            tempo_index=self.tempo_index,
        )

    def next_blueprint(self, memory: EnvMemory, epoch: int) -> str | None:
        """The next blueprint of the rotation that is not penalised at ``epoch``."""
        return germination.next_blueprint(self.blueprint_order, memory, epoch)


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(HeuristicPolicy)
