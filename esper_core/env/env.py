"""MorphogeneticEnv: one RL episode is one host training run, one step one epoch.

A step (DOMAIN §5): apply the action -> train one epoch -> validate with fused
counterfactuals and probe the slots' expansion scores -> governor check -> advance alpha
schedules and cooldowns -> compute the reward -> build the next observation.

Executors drive the epoch through :meth:`apply_action`, :meth:`begin_epoch`,
:meth:`train_batch` and :meth:`end_epoch` (:meth:`step` does all of it for one env).
:meth:`end_epoch` is :meth:`queue_measurements` (device work only), one :func:`fetch` and
the rest, so an executor can queue every env's validation before it reads any. Each part
has its own module; this class keeps the order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

import torch

from esper_core.components.blueprint import Blueprint
from esper_core.components.growth_operator import GrowthOperator
from esper_core.components.policy import HostGrowthSpec
from esper_core.components.reward import RewardBreakdown, RewardFamily, checked_breakdown
from esper_core.components.task import Task, TaskData
from esper_core.config import RunConfig
from esper_core.env import birth, epoch_end, host_growth
from esper_core.env.apply import StepStart, start_step
from esper_core.env.birth import BirthSeed
from esper_core.env.cost import CostMeter, account_training
from esper_core.env.data import Batch, make_loader
from esper_core.env.device import canonical_device
from esper_core.env.episode import EpisodeStats
from esper_core.env.evaluation import EvalResult, VariantMasks, validate_pending
from esper_core.env.events import StepEvents
from esper_core.env.expansion_score import ExpansionScores, probe
from esper_core.env.observation import Observation, observe
from esper_core.env.pending import Pending, fetch
from esper_core.env.state import env_state, env_state_dict, last_train_stats, load_torch_state
from esper_core.env.step import EpochMetrics, StepResult
from esper_core.env.training import EpochTrainer, Trainer, TrainStats
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import Action, ActionMasks, ActionSpace, MaskRules, compute_masks
from esper_core.lifecycle.governor import Governor
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot_state import SlotSettings
from esper_core.run.telemetry import Event


class MorphogeneticEnv:
    last_expansion: ExpansionScores  # the last probe's (see _expansion)

    def __init__(
        self,
        task: Task,
        reward: RewardFamily,
        blueprints: Sequence[Blueprint],
        config: RunConfig,
        env_index: int = 0,
        device: torch.device | str = "cpu",
        operators: Sequence[GrowthOperator] = (),
    ) -> None:
        self.task = task
        self.operators = {op.name: op for op in operators}  # a host growth's, by name
        self.reward = reward
        self.config = config
        self.env_index, self.pair_label = env_index, ""  # PairedEnv names its pair
        self.device = canonical_device(device)
        self.blueprints = {bp.key: bp for bp in blueprints if bp.topology == task.topology}
        env = config.env
        self.max_epochs = env.max_epochs or task.default_max_epochs
        self.batch_size = env.batch_size or task.default_batch_size
        self.eval_batch_size = env.eval_batch_size or task.default_eval_batch_size
        self.settings = SlotSettings.from_lifecycle(config.lifecycle, self.max_epochs)
        self.mask_rules = MaskRules.from_config(env, config.lifecycle)
        self.seed, self.episode = config.run.seed + env_index, 0
        self._build(self.seed)
        lc = config.lifecycle
        self.space = ActionSpace(
            tuple(self.model.slot_ids),
            tuple(sorted(self.blueprints)),
            tuple(lc.styles),
            tuple(lc.tempos),
            tuple(lc.alpha_targets),
        )
        self.host_growth_specs: tuple[HostGrowthSpec, ...] = ()
        self.online_growth_specs: tuple[HostGrowthSpec, ...] = ()  # see host_growth_online
        self.fits = host_growth.slot_fits(self)
        self._started = False
        self._step: StepStart | None = None
        self.birth_seeds: tuple[BirthSeed, ...] = ()
        self._birth_events: list[Event] = []
        self._masks = VariantMasks()

    # ------------------------------------------------------------ construction

    def _resolve_blueprint(self, key: str) -> Blueprint:
        if key in self.blueprints:
            return self.blueprints[key]
        available = ", ".join(sorted(self.blueprints)) or "none"
        problem = f"blueprint {key!r} is not registered for {self.task.topology} hosts"
        raise ConfigError([f"{problem}; available: {available}"])

    def _build(self, seed: int) -> None:
        """A fresh host, trainer, governor and data order for an episode seeded with ``seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            host = self.task.build_host()
        self.model = MorphogeneticModel(
            host, self._resolve_blueprint, self.settings, self.config.env.slots
        ).to(self.device)
        self.host_params = self.model.host_param_count()
        # The host as built, before any growth of its own: what params_added counts from.
        self.birth_host_params = self.host_params
        self.governor = Governor(self.config.governor, self.task.chance_loss)
        self.cost = CostMeter(tuple(self.operators.values()))
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
        self.trainer: Trainer = EpochTrainer(
            self.model,
            self.task,
            self.config.training,
            self.device,
            total_steps=self.max_epochs * len(self._train_loader),
        )

    def _eval_batches(self, split: Any, size: int = 0) -> Iterator[Batch]:
        batch_size = size or self.eval_batch_size
        loader = make_loader(split, batch_size, device=self.device, generator=None, shuffle=False)
        for inputs, targets in loader:
            yield self.task.prepare_batch(inputs, targets, False, None)

    def _evaluations(self, with_test: bool) -> list[Pending]:
        """Validation with fused counterfactuals, plus the test split when it is due."""
        amp = self.config.training.amp
        val_batches = self._validation_batches()
        pendings = [
            validate_pending(self.model, self.task, val_batches, amp=amp, masks=self._masks)
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

    # ------------------------------------------------------------ episode state

    def install_at_birth(self, specs: Sequence[str]) -> None:
        """Install these ``blueprint@slot`` seeds at birth from the next :meth:`reset` on."""
        self.birth_seeds = birth.parse_birth_seeds(specs, self.blueprints, self.model.slot_ids)

    def schedule_host_growth(self, specs: Sequence[HostGrowthSpec]) -> None:
        """Grow the host as ``specs`` say in every episode from the next :meth:`reset` on."""
        self.host_growth_specs = host_growth.check_specs(specs, self)

    def reset(self, seed: int | None = None, episode: int = 0) -> Observation:
        """Start an episode: a fresh host seeded with ``seed`` (data order too)."""
        self.seed = self.seed if seed is None else seed
        self.episode = episode
        self._build(self.seed)
        self.epoch = 0
        self.stats = EpisodeStats()
        host_batch = next(self._eval_batches(self.data.val, 4))
        self.cost.measure_host(self.model, self.task.loss, host_batch)
        events = StepEvents(env=self.env_index, episode=episode, epoch=0)
        grown_at_birth = host_growth.start_at_birth(self, events)
        birth.install(self, self.birth_seeds, events)
        self.last_eval, self.last_expansion = fetch(*self._evaluations(False), self._expansion())
        self.last_train: TrainStats | None = None
        self.last_test: EvalResult | None = None
        self._record_validation(self.last_eval)
        self.governor.take_snapshot(self.model, 0)
        if not grown_at_birth:
            host_growth.start_due(self, events)  # one scheduled at epoch 0
        self._birth_events = events.events  # the first step's, with seeds installed at birth
        self.fits = host_growth.slot_fits(self)
        self._started = True
        self._observation = observe(self, rolled_back=False)
        return self._observation

    @property
    def observation(self) -> Observation:
        return self._observation

    def masks(self) -> ActionMasks:
        gates = [slot.next_gate() for slot in self.model.iter_slots()]
        return compute_masks(self.model.reports(), self.space, self.mask_rules, gates, self.fits)

    def _record_validation(self, ev: EvalResult) -> None:
        env = self.config.env
        self.stats.record_validation(ev.accuracy, ev.loss, env.plateau_delta, env.history_length)

    # ------------------------------------------------------------ the step

    def apply_action(self, action: Action) -> None:
        """Apply the controller's action; an illegal one is refused and counted."""
        if not self._started:
            raise RuntimeError("call reset() before stepping the env")
        if self.epoch >= self.max_epochs:
            raise RuntimeError(f"the episode is over ({self.max_epochs} epochs); call reset()")
        started = time.perf_counter()
        events = StepEvents(env=self.env_index, episode=self.episode, epoch=self.epoch)
        events.events.extend(self._birth_events)  # seeds installed at birth: the first step's
        self._birth_events = []
        self._step = start_step(self, action, events, started)

    def begin_epoch(self) -> None:
        self.model.clear_nonfinite()
        self.trainer.begin_epoch()
        self.cost.begin_epoch(self.model)

    def train_batches(self) -> Iterator[Batch]:
        return iter(self._train_loader)

    def train_batch(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        inputs, targets = self.task.prepare_batch(batch[0], batch[1], True, self.generator)
        account_training(self, inputs, targets)
        self.trainer.train_batch(inputs, targets)

    def queue_measurements(self) -> list[Pending]:
        """The epoch's numbers, queued on the device: training statistics, validation with
        its counterfactuals (and the test split when due), non-finite seed outputs."""
        assert self._step is not None, "queue_measurements() follows apply_action()"
        with_test = self._test_due(self.epoch + 1)
        ids = self.model.slot_ids
        return [
            self.trainer.end_epoch(),
            *self._evaluations(with_test),
            self._expansion(),
            Pending(self.model.nonfinite_counts(), lambda n: dict(zip(ids, n))),
        ]

    def _expansion(self) -> Pending:
        """The slots' expansion scores (a function of model and data: resume recomputes it)."""
        batches = islice(self._validation_batches(), self.config.env.expansion_batches)
        return probe(self.model, self.task.loss, batches, self.seed * 100_003 + self.epoch)

    def _validation_batches(self) -> Iterator[Batch]:
        return self._eval_batches(self.data.val)

    def end_epoch(self, measured: Sequence[Any] | None = None) -> StepResult:
        """Run the governor, tick the slots, compute the reward and observe, from
        ``measured``: the fetched :meth:`queue_measurements` of an executor that queued
        every env's before reading any, or (None) measured here, in the epoch's one host
        synchronisation."""
        if measured is None:
            measured = fetch(*self.queue_measurements())
        step, self._step = self._step, None
        assert step is not None, "end_epoch() follows apply_action()"
        epoch = self.epoch + 1
        with_test = self._test_due(epoch)
        train: TrainStats = measured[0]
        ev: EvalResult = measured[1]
        test: EvalResult | None = measured[2] if with_test else None
        nonfinite: dict[str, float] = measured[-1]
        self.last_expansion = measured[-2]
        self.epoch = step.events.epoch = epoch
        self.last_train = train
        epoch_end.record_measurements(self.model, train, ev)
        epoch_end.prune_nonfinite(self, nonfinite, step.events)

        verdict = self.governor.check(ev.loss, train.finite, ev.accuracy)
        rolled_back = verdict.panic
        if rolled_back:
            epoch_end.rollback(self, verdict.reason, ev.loss, step.events)
            # Observe the restored model, not the one that diverged.
            *fetched, self.last_expansion = fetch(*self._evaluations(with_test), self._expansion())
            ev, test = fetched[0], (fetched[1] if with_test else None)

        epoch_end.tick_slots(self.model, step.events)
        host_growth.tick(self, step.events)
        if self.config.lifecycle.auto_advance:
            epoch_end.auto_advance(self, ev.accuracy, step.events)
        if not rolled_back and self.governor.due(epoch):
            self.governor.take_snapshot(self.model, epoch)
        host_growth.start_due(self, step.events)  # the next epoch's, before the policy observes

        self.last_eval = ev
        if test is not None:
            self.last_test = test
        self._record_validation(ev)
        breakdown = checked_breakdown(
            self.reward.compute(epoch_end.reward_context(self, step, ev, rolled_back)),
            self.reward,
            epoch,
        )
        if rolled_back:
            breakdown = breakdown.plus(governor_penalty=self.config.governor.penalty)
        self.stats.add_reward(breakdown)
        self._observation = observe(self, rolled_back)
        return self._result(step, train, ev, test, breakdown, rolled_back)

    def _result(
        self,
        step: StepStart,
        train: TrainStats,
        ev: EvalResult,
        test: EvalResult | None,
        breakdown: RewardBreakdown,
        rolled_back: bool,
    ) -> StepResult:
        """The step's result, its epoch event and (on the last epoch) the episode event."""
        done = self.epoch >= self.max_epochs
        metrics = EpochMetrics(
            train_loss=train.loss,
            train_acc=train.accuracy,
            val_loss=ev.loss,
            val_acc=ev.accuracy,
            test_loss=test.loss if test else None,
            test_acc=test.accuracy if test else None,
            epoch_time=time.perf_counter() - step.started,
            batches=train.batches,
        )
        step.events.epoch_completed(
            metrics,
            self._observation.slots,
            action=step.decision.action,
            action_refused=step.outcome.refused,
            reason=step.decision.reason,
            reward=breakdown.total,
            reward_components=dict(breakdown.components),
            host_params=self.host_params,
            seed_params=self.model.seed_param_count(),
            train_flops=self.stats.train_flops,
        )
        if done:
            step.events.episode_finished(self)
        return StepResult(
            env_index=self.env_index,
            observation=self._observation,
            reward=breakdown.total,
            reward_components=dict(breakdown.components),
            done=done,
            terminal=done or rolled_back,
            metrics=metrics,
            refused=step.outcome.refused,
            rolled_back=rolled_back,
            events=step.events.events,
            info={
                "illegal": step.outcome.illegal,
                "refused_actions": self.stats.n_refused,
                "gate_failures": self.stats.n_gate_failures,
            },
            reason=step.decision.reason,
        )

    def step(self, action: Action) -> StepResult:
        """One RL step of this env alone (the serial path)."""
        return run_epoch(self, action)

    # ------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        return env_state_dict(self)

    def load_state_dict(self, data: dict[str, Any]) -> None:
        state = env_state(data)
        self.seed, self.episode = state.seed, state.episode
        self._build(self.seed)
        # A fresh host (every env builds one) replays them all; the Grower's kept one
        # holds those it has grown already (LoopEnv checks they are the state's).
        host_growth.replay(self, state.growths[len(self.model.host_growths) :])
        self.fits = host_growth.slot_fits(self)
        load_torch_state(self, data)
        self.epoch = state.epoch
        self.stats = state.counters
        self.last_eval, self.last_test = state.last_eval, state.last_test
        self.last_train = last_train_stats(state)
        if state.cost is not None:
            self.cost.load_state(state.cost)
        self.last_expansion = state.last_expansion or fetch(self._expansion())[0]
        self._started = True
        self._observation = observe(self, rolled_back=False)


def run_epoch(env: MorphogeneticEnv, action: Action) -> StepResult:
    """THE step of one env: action, one epoch of batches, then the end-of-epoch work."""
    env.apply_action(action)
    env.begin_epoch()
    for batch in env.train_batches():
        env.train_batch(batch)
    return env.end_epoch()
