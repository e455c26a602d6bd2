"""MorphogeneticEnv: one RL episode is one host training run, one step one epoch.

A step runs, in this order (DOMAIN §5): apply the controller's action -> train one
epoch -> validate with fused counterfactuals -> governor check -> advance alpha
schedules and cooldowns -> compute the reward -> build the next observation.

Executors drive the epoch through :meth:`apply_action`, :meth:`begin_epoch`,
:meth:`train_batches`/:meth:`train_batch` and :meth:`end_epoch`; :meth:`step` is the
same sequence for one env on its own (see :func:`run_epoch`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from attrs import frozen

from esper_core.components.blueprint import Blueprint
from esper_core.components.reward import RewardBreakdown, RewardContext, RewardFamily, SlotSnapshot
from esper_core.components.task import Task, TaskData
from esper_core.config import RunConfig
from esper_core.env.data import make_loader
from esper_core.env.observation import Observation
from esper_core.env.step import EpochMetrics, StepResult
from esper_core.env.training import (
    EpochTrainer,
    EvalResult,
    Pending,
    TrainStats,
    fetch,
    validate,
    validate_pending,
)
from esper_core.lifecycle.actions import (
    Action,
    ActionMasks,
    ActionSpace,
    LifecycleOp,
    MaskRules,
    compute_masks,
    refusal_reason,
)
from esper_core.lifecycle.governor import Governor
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.rules import LIVE_STAGES
from esper_core.lifecycle.slot import SeedSlot, SlotSettings
from esper_core.lifecycle.stages import GateThresholds, Stage
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    GateEvaluated,
    GovernorRollback,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
    SlotSummary,
    StageChanged,
)


def slot_settings(config: RunConfig) -> SlotSettings:
    lc = config.lifecycle
    return SlotSettings(
        gates=GateThresholds(
            strict=lc.gate_mode == "strict",
            min_training_epochs=lc.min_training_epochs,
            min_gradient_health=lc.min_gradient_health,
            min_grad_ratio=lc.min_grad_ratio,
            strict_min_blending_epochs=lc.strict_min_blending_epochs,
            strict_min_contribution=lc.strict_min_contribution,
        ),
        embargo_epochs=lc.embargo_epochs,
        resetting_epochs=lc.resetting_epochs,
        sigmoid_steepness=lc.sigmoid_steepness,
        stage_history=lc.stage_history,
    )


@frozen
class ActionOutcome:
    refused: str | None  # illegal action or failed gate: why nothing happened
    illegal: bool
    pruned_contribution: float | None = None
    fossilized_contribution: float | None = None


class MorphogeneticEnv:
    def __init__(
        self,
        task: Task,
        reward: RewardFamily,
        blueprints: Sequence[Blueprint],
        config: RunConfig,
        env_index: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.task = task
        self.reward = reward
        self.config = config
        self.env_index = env_index
        self.device = torch.device(device)
        self.blueprints = {bp.key: bp for bp in blueprints if bp.topology == task.topology}
        env = config.env
        self.max_epochs = env.max_epochs or task.default_max_epochs
        self.batch_size = env.batch_size or task.default_batch_size
        self.eval_batch_size = env.eval_batch_size or task.default_eval_batch_size
        self.settings = slot_settings(config)
        self.mask_rules = MaskRules(max_seeds=env.max_seeds, min_prune_age=env.min_prune_age)
        self.seed = config.run.seed + env_index
        self.episode = 0
        self._build(self.seed)
        lc = config.lifecycle
        self.space = ActionSpace(
            slot_ids=tuple(self.model.slot_ids),
            blueprints=tuple(sorted(self.blueprints)),
            styles=tuple(lc.styles),
            tempos=tuple(lc.tempos),
            alpha_targets=tuple(lc.alpha_targets),
        )
        self._started = False

    # ------------------------------------------------------------ construction

    def _resolve_blueprint(self, key: str) -> Blueprint:
        try:
            return self.blueprints[key]
        except KeyError:
            raise KeyError(
                f"blueprint {key!r} is not registered for {self.task.topology} hosts; "
                f"available: {', '.join(sorted(self.blueprints))}"
            ) from None

    def _build(self, seed: int) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            host = self.task.build_host()
        self.model = MorphogeneticModel(
            host, self._resolve_blueprint, self.settings, self.config.env.slots
        ).to(self.device)
        self.trainer = EpochTrainer(self.model, self.task, self.config.training, self.device)
        self.governor = Governor(self.config.governor, self.task.chance_loss)
        self.data: TaskData = self.task.load_data(self.device)
        self.generator = torch.Generator().manual_seed(seed)
        # Built once per episode: each iteration draws a fresh permutation from the
        # generator, and DataLoader workers (for datasets that do not fit) persist.
        self._train_loader = make_loader(
            self.data.train,
            self.batch_size,
            device=self.device,
            generator=self.generator,
            shuffle=True,
            max_batches=self.config.env.max_batches,
            num_workers=self.config.env.num_workers,
        )

    def _eval_batches(self, split: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        loader = make_loader(
            split, self.eval_batch_size, device=self.device, generator=None, shuffle=False
        )
        for inputs, targets in loader:
            yield self.task.prepare_batch(inputs, targets, False, None)

    # ------------------------------------------------------------ episode state

    def reset(self, seed: int | None = None, episode: int = 0) -> Observation:
        """Start an episode: a fresh host seeded with ``seed`` (data order too)."""
        self.seed = self.seed if seed is None else seed
        self.episode = episode
        self._build(self.seed)
        self.epoch = 0
        self.val_history: list[float] = []
        self.acc_history: list[float] = []
        self.best_acc = -math.inf
        self.plateau_epochs = 0
        self.last_prune_epoch: int | None = None
        self.n_germinated = 0
        self.n_fossilized = 0
        self.n_pruned = 0
        self.n_refused = 0
        self.n_gate_failures = 0
        self.reward_total = 0.0
        self.reward_components: dict[str, float] = {}
        self.host_params = self.model.host_param_count()
        ev = validate(
            self.model, self.task, self._eval_batches(self.data.val), amp=self.config.training.amp
        )
        self.last_eval = ev
        self.last_train: TrainStats | None = None
        self.last_test: EvalResult | None = None
        self._record_history(ev.accuracy, ev.loss)
        self.governor.take_snapshot(self.model, 0)
        self._started = True
        self._observation = self._observe(rolled_back=False)
        return self._observation

    @property
    def observation(self) -> Observation:
        return self._observation

    def _record_history(self, acc: float, loss: float) -> None:
        if acc > self.best_acc + self.config.env.plateau_delta:
            self.plateau_epochs = 0
        else:
            self.plateau_epochs += 1
        self.best_acc = max(self.best_acc, acc)
        self.val_history.append(loss)
        self.acc_history.append(acc)
        keep = self.config.env.history_length
        del self.val_history[:-keep], self.acc_history[:-keep]

    def masks(self) -> ActionMasks:
        return compute_masks(self.model.reports(), self.space, self.mask_rules)

    def _observe(self, rolled_back: bool) -> Observation:
        reports = tuple(self.model.reports())
        train = self.last_train
        since_prune = (
            self.epoch - self.last_prune_epoch if self.last_prune_epoch is not None else 10_000
        )
        return Observation(
            env_index=self.env_index,
            epoch=self.epoch,
            max_epochs=self.max_epochs,
            val_loss=self.last_eval.loss,
            val_acc=self.last_eval.accuracy,
            train_loss=train.loss if train else self.last_eval.loss,
            train_acc=train.accuracy if train else self.last_eval.accuracy,
            chance_loss=self.task.chance_loss,
            loss_history=tuple(self.val_history),
            acc_history=tuple(self.acc_history),
            plateau_epochs=self.plateau_epochs,
            best_acc=self.best_acc,
            epochs_since_prune=since_prune,
            host_params=self.host_params,
            seed_params=self.model.seed_param_count(),
            slots=reports,
            gates=tuple(slot.next_gate() for slot in self.model.iter_slots()),
            masks=compute_masks(reports, self.space, self.mask_rules),
            rolled_back=rolled_back,
        )

    def _snapshots(self) -> tuple[SlotSnapshot, ...]:
        return tuple(
            SlotSnapshot(
                r.slot_id, r.stage, r.epochs_in_stage, r.alpha, r.contribution, r.seed_params
            )
            for r in self.model.reports()
        )

    # ------------------------------------------------------------ events

    def _ev(self, cls: Any, **fields: Any) -> Event:
        return cls(env=self.env_index, episode=self.episode, epoch=self.epoch, **fields)

    def _stage_event(self, slot: SeedSlot, before: Stage) -> list[Event]:
        if slot.stage == before:
            return []
        return [
            self._ev(
                StageChanged,
                slot_id=slot.slot_id,
                seed_id=slot.state.seed_id,
                from_stage=before.value,
                to_stage=slot.stage.value,
            )
        ]

    def _gate_event(self, slot: SeedSlot, gate: Any) -> Event:
        return self._ev(
            GateEvaluated,
            slot_id=slot.slot_id,
            seed_id=slot.state.seed_id,
            gate=gate.gate,
            passed=gate.passed,
            failed=list(gate.failed),
        )

    def _pruned_event(
        self,
        slot: SeedSlot,
        stage: Stage,
        seed_id: str,
        blueprint: str,
        contribution: float | None,
        params: int,
        germinated: int,
        reason: str,
    ) -> Event:
        return self._ev(
            SeedPruned,
            slot_id=slot.slot_id,
            seed_id=seed_id,
            blueprint=blueprint,
            stage=stage.value,
            contribution=contribution,
            params=params,
            germinated_epoch=germinated,
            reason=reason,
        )

    # ------------------------------------------------------------ the step

    def apply_action(self, action: Action) -> None:
        """Apply the controller's action; an illegal one is refused and counted."""
        if not self._started:
            raise RuntimeError("call reset() before stepping the env")
        if self.epoch >= self.max_epochs:
            raise RuntimeError(f"the episode is over ({self.max_epochs} epochs); call reset()")
        self._step_started = time.perf_counter()
        self._events: list[Event] = []
        self._action = action
        self._slots_before = self._snapshots()
        self._val_before = (self.last_eval.accuracy, self.last_eval.loss)
        reason = refusal_reason(action, self._observation.masks, self.space)
        if reason is not None:
            self.n_refused += 1
            self._outcome = ActionOutcome(refused=reason, illegal=True)
            return
        self._outcome = self._apply(action)
        if self._outcome.refused is not None:
            self.n_gate_failures += 1

    def _apply(self, action: Action) -> ActionOutcome:
        op = action.op
        if op == LifecycleOp.WAIT:
            return ActionOutcome(refused=None, illegal=False)
        slot = self.model.slot(self.space.slot_ids[action.slot])
        before = slot.stage
        acc = self.last_eval.accuracy
        events = self._events
        if op == LifecycleOp.GERMINATE:
            blueprint = self.blueprints[self.space.blueprints[action.blueprint]]
            self.n_germinated += 1
            seed_id = f"{slot.slot_id}-s{self.n_germinated}"
            slot.germinate(
                seed_id,
                blueprint,
                self.space.styles[action.style],
                tempo=self.space.tempos[action.tempo],
                epoch=self.epoch,
                accuracy=acc,
                init_seed=self.seed * 1_000_003 + self.n_germinated,
            )
            self.trainer.sync_optimizers()
            events.append(
                self._ev(
                    SeedGerminated,
                    slot_id=slot.slot_id,
                    seed_id=seed_id,
                    blueprint=blueprint.key,
                    style=self.space.styles[action.style],
                    tempo=self.space.tempos[action.tempo],
                    params=slot.seed_param_count(),
                )
            )
            events.extend(self._stage_event(slot, before))
            return ActionOutcome(refused=None, illegal=False)
        if op == LifecycleOp.ADVANCE:
            gate = slot.advance(accuracy=acc)
            events.append(self._gate_event(slot, gate))
            events.extend(self._stage_event(slot, before))
            return ActionOutcome(refused=None if gate.passed else gate.reason, illegal=False)
        if op == LifecycleOp.SET_ALPHA_TARGET:
            slot.set_alpha_target(self.space.alpha_targets[action.alpha_target], accuracy=acc)
            events.extend(self._stage_event(slot, before))
            return ActionOutcome(refused=None, illegal=False)
        if op == LifecycleOp.PRUNE:
            contribution = slot.state.contribution
            events.append(
                self._pruned_event(
                    slot,
                    before,
                    slot.state.seed_id or "",
                    slot.state.blueprint or "",
                    contribution,
                    slot.seed_param_count(),
                    slot.state.germinated_epoch,
                    "policy",
                )
            )
            slot.prune()
            self.trainer.sync_optimizers()
            self.n_pruned += 1
            self.last_prune_epoch = self.epoch
            events.extend(self._stage_event(slot, before))
            return ActionOutcome(refused=None, illegal=False, pruned_contribution=contribution)
        assert op == LifecycleOp.FOSSILIZE
        gate = slot.fossilize(accuracy=acc)
        events.append(self._gate_event(slot, gate))
        if not gate.passed:
            return ActionOutcome(refused=gate.reason, illegal=False)
        self._fossilized(slot, before)
        return ActionOutcome(
            refused=None, illegal=False, fossilized_contribution=slot.state.contribution
        )

    def _fossilized(self, slot: SeedSlot, before: Stage) -> None:
        """Bookkeeping of a fossilization (by action or auto-advance): events and a snapshot."""
        self.n_fossilized += 1
        self._events.append(
            self._ev(
                SeedFossilized,
                slot_id=slot.slot_id,
                seed_id=slot.state.seed_id or "",
                blueprint=slot.state.blueprint or "",
                contribution=slot.state.contribution,
                params=slot.seed_param_count(),
                germinated_epoch=slot.state.germinated_epoch,
            )
        )
        self._events.extend(self._stage_event(slot, before))
        self.governor.take_snapshot(self.model, self.epoch)

    def begin_epoch(self) -> None:
        self.trainer.begin_epoch()

    def train_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self._train_loader)

    def train_batch(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        inputs, targets = self.task.prepare_batch(batch[0], batch[1], True, self.generator)
        self.trainer.train_batch(inputs, targets)

    def _evaluations(self, with_test: bool) -> list[Pending]:
        """Validation with fused counterfactuals, plus the test split when it is due."""
        amp = self.config.training.amp
        pendings = [
            validate_pending(self.model, self.task, self._eval_batches(self.data.val), amp=amp)
        ]
        if with_test:
            test_batches = self._eval_batches(self.data.test)
            pendings.append(
                validate_pending(self.model, self.task, test_batches, counterfactual=False, amp=amp)
            )
        return pendings

    def _test_due(self, epoch: int) -> bool:
        every = self.config.env.eval_test_every
        return epoch >= self.max_epochs or (every > 0 and epoch % every == 0)

    def end_epoch(self) -> StepResult:
        """Validate, run the governor, tick the slots, compute the reward and observe."""
        epoch = self.epoch + 1
        pendings = [self.trainer.end_epoch(), *self._evaluations(self._test_due(epoch))]
        fetched = fetch(*pendings)  # the epoch's one host synchronisation
        train: TrainStats = fetched[0]
        ev: EvalResult = fetched[1]
        test: EvalResult | None = fetched[2] if len(fetched) > 2 else None
        self.epoch = epoch
        self.last_train = train

        for slot in self.model.iter_slots():
            stats = train.seeds.get(slot.slot_id)
            if stats is not None:
                slot.record_gradients(
                    stats.health, stats.exploding, stats.grad_ratio, stats.grad_norm
                )
            slot.record_contribution(
                ev.contributions.get(slot.slot_id), loss_finite=ev.finite and train.finite
            )

        verdict = self.governor.check(ev.loss, train.finite)
        rolled_back = verdict.panic
        if rolled_back:
            ev, test = self._rollback(verdict.reason, ev.loss, test is not None)

        for slot in self.model.iter_slots():
            before = slot.stage
            slot.end_epoch()
            self._events.extend(self._stage_event(slot, before))
        if self.config.lifecycle.auto_advance:
            self._auto_advance(ev.accuracy)
        if not rolled_back and self.governor.due(epoch):
            self.governor.take_snapshot(self.model, epoch)

        self.last_eval = ev
        if test is not None:
            self.last_test = test
        self._record_history(ev.accuracy, ev.loss)
        breakdown = self._reward(ev, rolled_back)
        self.reward_total += breakdown.total
        for key, value in breakdown.components.items():
            self.reward_components[key] = self.reward_components.get(key, 0.0) + value

        done = epoch >= self.max_epochs
        self._observation = self._observe(rolled_back)
        metrics = EpochMetrics(
            train_loss=train.loss,
            train_acc=train.accuracy,
            val_loss=ev.loss,
            val_acc=ev.accuracy,
            test_loss=test.loss if test else None,
            test_acc=test.accuracy if test else None,
            epoch_time=time.perf_counter() - self._step_started,
            batches=train.batches,
        )
        events = self._events
        events.append(self._epoch_event(metrics, breakdown))
        if done:
            events.append(self._episode_event())
        return StepResult(
            env_index=self.env_index,
            observation=self._observation,
            reward=breakdown.total,
            reward_components=dict(breakdown.components),
            done=done,
            terminal=done or rolled_back,
            metrics=metrics,
            refused=self._outcome.refused,
            rolled_back=rolled_back,
            events=events,
            info={
                "illegal": self._outcome.illegal,
                "refused_actions": self.n_refused,
                "gate_failures": self.n_gate_failures,
            },
        )

    def _rollback(
        self, reason: str, loss: float, with_test: bool
    ) -> tuple[EvalResult, EvalResult | None]:
        live = {
            s.slot_id: (
                s.stage,
                s.state.seed_id or "",
                s.state.blueprint or "",
                s.state.contribution,
                s.seed_param_count(),
                s.state.germinated_epoch,
            )
            for s in self.model.iter_slots()
            if s.stage in LIVE_STAGES
        }
        pruned = self.governor.rollback(self.model)
        self.trainer.reset_optimizers()
        self.n_pruned += len(pruned)
        self._events.append(
            self._ev(
                GovernorRollback,
                reason=reason,
                val_loss=loss,
                penalty=self.config.governor.penalty,
                snapshot_epoch=self.governor.snapshot_epoch,
            )
        )
        for slot_id in pruned:
            slot = self.model.slot(slot_id)
            stage, seed_id, blueprint, contribution, params, germinated = live[slot_id]
            self._events.append(
                self._pruned_event(
                    slot, stage, seed_id, blueprint, contribution, params, germinated, "rollback"
                )
            )
            self._events.extend(self._stage_event(slot, stage))
        # Observe the restored model, not the one that diverged.
        fetched = fetch(*self._evaluations(with_test))
        return fetched[0], (fetched[1] if with_test else None)

    def _auto_advance(self, accuracy: float) -> None:
        for slot in self.model.iter_slots():
            gate = slot.next_gate()
            if gate is None or not gate.passed:
                continue
            before = slot.stage
            self._events.append(self._gate_event(slot, gate))
            if before == Stage.HOLDING:
                slot.fossilize(accuracy=accuracy)
                self._fossilized(slot, before)
            else:
                slot.advance(accuracy=accuracy)
                self._events.extend(self._stage_event(slot, before))

    def _reward(self, ev: EvalResult, rolled_back: bool) -> RewardBreakdown:
        action = self._action
        targeted = action.op != LifecycleOp.WAIT and 0 <= action.slot < len(self.space.slot_ids)
        target = self.space.slot_ids[action.slot] if targeted else None
        fossils_contributing = sum(
            1
            for s in self.model.iter_slots()
            if s.stage == Stage.FOSSILIZED
            and (s.state.contribution or 0.0) >= self.config.env.fossil_contribution_points
        )
        ctx = RewardContext(
            action=action,
            op=action.op,
            target_slot=target,
            applied=self._outcome.refused is None,
            epoch=self.epoch,
            max_epochs=self.max_epochs,
            val_acc_prev=self._val_before[0],
            val_acc=ev.accuracy,
            val_loss_prev=self._val_before[1],
            val_loss=ev.loss,
            slots_before=self._slots_before,
            slots_after=self._snapshots(),
            host_params=self.host_params,
            seed_params=self.model.seed_param_count(),
            fossil_params=self.model.fossil_param_count(),
            pruned_contribution=self._outcome.pruned_contribution,
            fossilized_contribution=self._outcome.fossilized_contribution,
            fossils_contributing=fossils_contributing,
            rolled_back=rolled_back,
            chance_loss=self.task.chance_loss,
        )
        breakdown = self.reward.compute(ctx)
        if rolled_back:
            breakdown = breakdown.plus(governor_penalty=self.config.governor.penalty)
        return breakdown

    def _epoch_event(self, m: EpochMetrics, breakdown: RewardBreakdown) -> Event:
        slots = [
            SlotSummary(
                slot_id=r.slot_id,
                stage=r.stage.value,
                seed_id=r.seed_id,
                blueprint=r.blueprint,
                alpha=r.alpha,
                contribution=r.contribution,
                seed_params=r.seed_params,
            )
            for r in self._observation.slots
        ]
        return self._ev(
            EpochCompleted,
            train_loss=m.train_loss,
            train_acc=m.train_acc,
            val_loss=m.val_loss,
            val_acc=m.val_acc,
            test_loss=m.test_loss,
            test_acc=m.test_acc,
            action=self.space.describe(self._action),
            action_refused=self._outcome.refused,
            reward=breakdown.total,
            reward_components=dict(breakdown.components),
            host_params=self.host_params,
            seed_params=self.model.seed_param_count(),
            slots=slots,
            epoch_time=m.epoch_time,
        )

    def _episode_event(self) -> Event:
        test = self.last_test
        return EpisodeFinished(
            env=self.env_index,
            episode=self.episode,
            epochs=self.epoch,
            final_val_acc=self.last_eval.accuracy,
            final_test_acc=test.accuracy if test else None,
            final_test_loss=test.loss if test else None,
            total_reward=self.reward_total,
            reward_components=dict(self.reward_components),
            host_params=self.host_params,
            params_added=self.model.seed_param_count(),
            seeds_germinated=self.n_germinated,
            seeds_fossilized=self.n_fossilized,
            seeds_pruned=self.n_pruned,
            rollbacks=self.governor.rollbacks,
            refused_actions=self.n_refused,
            seed=self.seed,
        )

    def step(self, action: Action) -> StepResult:
        """One RL step of this env alone (the serial path)."""
        return run_epoch(self, action)

    # ------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "episode": self.episode,
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "trainer": self.trainer.state_dict(),
            "governor": self.governor.state_dict(),
            "generator": self.generator.get_state(),
            "counters": {
                "val_history": list(self.val_history),
                "acc_history": list(self.acc_history),
                "best_acc": self.best_acc,
                "plateau_epochs": self.plateau_epochs,
                "last_prune_epoch": self.last_prune_epoch,
                "n_germinated": self.n_germinated,
                "n_fossilized": self.n_fossilized,
                "n_pruned": self.n_pruned,
                "n_refused": self.n_refused,
                "n_gate_failures": self.n_gate_failures,
                "reward_total": self.reward_total,
                "reward_components": dict(self.reward_components),
            },
            "last_eval": _eval_dict(self.last_eval),
            "last_test": _eval_dict(self.last_test) if self.last_test else None,
            "last_train": None
            if self.last_train is None
            else [self.last_train.loss, self.last_train.accuracy],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.episode = int(state["episode"])
        self._build(self.seed)
        self.model.load_state_dict(state["model"])
        self.trainer.load_state_dict(state["trainer"])
        self.governor.load_state_dict(state["governor"])
        self.generator.set_state(state["generator"])
        self.epoch = int(state["epoch"])
        c = state["counters"]
        self.val_history, self.acc_history = list(c["val_history"]), list(c["acc_history"])
        self.best_acc, self.plateau_epochs = float(c["best_acc"]), int(c["plateau_epochs"])
        self.last_prune_epoch = c["last_prune_epoch"]
        self.n_germinated, self.n_fossilized = int(c["n_germinated"]), int(c["n_fossilized"])
        self.n_pruned, self.n_refused = int(c["n_pruned"]), int(c["n_refused"])
        self.n_gate_failures = int(c["n_gate_failures"])
        self.reward_total, self.reward_components = (
            float(c["reward_total"]),
            dict(c["reward_components"]),
        )
        self.host_params = self.model.host_param_count()
        self.last_eval = EvalResult(**state["last_eval"])
        self.last_test = EvalResult(**state["last_test"]) if state["last_test"] else None
        lt = state["last_train"]
        self.last_train = None if lt is None else TrainStats(lt[0], lt[1], 0, 0, 0.0, True, {})
        self._started = True
        self._observation = self._observe(rolled_back=False)


def _eval_dict(ev: EvalResult) -> dict[str, Any]:
    return {
        "loss": ev.loss,
        "accuracy": ev.accuracy,
        "contributions": dict(ev.contributions),
        "all_off_accuracy": ev.all_off_accuracy,
        "finite": ev.finite,
    }


def run_epoch(env: MorphogeneticEnv, action: Action) -> StepResult:
    """THE step of one env: action, one epoch of batches, then the end-of-epoch work."""
    env.apply_action(action)
    env.begin_epoch()
    for batch in env.train_batches():
        env.train_batch(batch)
    return env.end_epoch()
