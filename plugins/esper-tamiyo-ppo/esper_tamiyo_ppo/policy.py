"""The PPO Tamiyo: acting, recording the rollout, checkpoints; the update is in ``update``.

:class:`PPOPolicy` does the work of the ``policies.ppo`` component (the runner builds it
through :class:`esper_tamiyo_ppo.plugin.PPO`, which keeps torch out of plugin discovery).
How ``esper train`` drives it, once per update: ``reset(all envs)`` ->
``begin_rollout(obs)`` -> T x (``act(obs)`` -> envs step -> ``observe(results)``) ->
``update(last_obs)``. ``act`` normalises the features with the FROZEN normaliser, samples
every head with the policy's own generator and, while training, records exactly those
normalised features in the rollout buffer. ``update`` scales the rewards, runs GAE with
the run's γ and the PPO epochs, then updates the normaliser with the rollout's raw
features. ``state_dict`` holds everything (network, optimiser, normalisers, generators,
buffer and position, LSTM states) so a run interrupted mid-rollout resumes exactly.

``--policy ppo:DIR/checkpoint.pt`` (or ``ppo:DIR``, or ``ppo:pretrained``, the shipped one)
loads a trained policy's network and observation normaliser for evaluation; the
checkpoint's architecture options win; ``init_from`` loads them into a new training run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from esper_core.components.policy import HostGrowthSpec, PolicyContext
from esper_core.converter import unstructure
from esper_core.env.observation import Observation
from esper_core.env.step import StepResult
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.actions import HEADS, Action
from esper_tamiyo_ppo.buffer import RolloutBuffer, step_groups
from esper_tamiyo_ppo.compat import (
    STATE_KIND,
    STATE_VERSION,
    check_compatible,
    check_growth_request,
    load_policy_state,
    schema_version,
    space_to_dict,
)
from esper_tamiyo_ppo.distributions import BatchMasks, run_heads, used_heads_table
from esper_tamiyo_ppo.first_epochs import masks_before
from esper_tamiyo_ppo.host_growth import HostGrowthChoice
from esper_tamiyo_ppo.init_from import load_init_state
from esper_tamiyo_ppo.network import ActorCritic
from esper_tamiyo_ppo.normalizers import (
    ObservationNormalizer,
    RewardNormalizer,
    SlotObservationNormalizer,
)
from esper_tamiyo_ppo.options import (
    MODEL_FIELDS,
    PPOOptions,
    check_seed_groups,
    saved_model_fields,
)
from esper_tamiyo_ppo.policy_features import raw_features
from esper_tamiyo_ppo.slot_layout import SCHEMA_VERSION, SlotLayout, schema
from esper_tamiyo_ppo.slot_network import SlotActorCritic
from esper_tamiyo_ppo.state_values import check_state_values
from esper_tamiyo_ppo.update import PPOLearner

SHUFFLE_SEED_OFFSET = 1  # the minibatch generator is seeded apart from the sampling one


class PPOPolicy:
    """Constructed as ``PPOPolicy(options, context)``, like every policy component."""

    def __init__(self, options: PPOOptions, context: PolicyContext) -> None:
        trained: tuple[dict[str, Any], str] | None = None
        untrained = not context.argument and not options.init_from
        if untrained and context.total_updates == 0 and not options.allow_untrained:
            # Evaluating random weights is almost never what was meant.
            raise ConfigError(
                [
                    "run.policy: `ppo` without a checkpoint would evaluate an untrained policy; "
                    "name one with --policy ppo:DIR/checkpoint.pt (train it with `esper train`), "
                    "or set policies.ppo.allow_untrained=true"
                ]
            )
        if context.argument:
            trained = load_policy_state(context.argument)
            check_compatible(
                trained[0],
                context.space,
                context.feature_dim,
                trained[1],
                context.task,
                context.history_length,
            )
            check_growth_request(options, trained[0], trained[1])
            options = attrs.evolve(options, **saved_model_fields(trained[0]))
        elif options.init_from:  # a new run from a trained slots network (init_from.py)
            trained = load_init_state(options, context)
        check_seed_groups(options, context)
        self.options = options
        self.context = context
        self.device = torch.device(context.device)
        self.grows_host = options.host_growth != "off"
        self.host_growth_where_possible = options.host_growth == "auto"  # either, as it can
        space = context.space
        n_envs = context.n_envs
        n_steps = context.max_epochs * options.rollout_episodes  # one rollout, per env
        # The slots network reads its own features (slot_features); their layout follows
        # this run's slot and blueprint counts, the network's weights do not, and their
        # schema is a trained network's own (a new one reads the latest).
        slots = options.network == "slots"
        version = schema_version(trained[0]) if trained and slots else SCHEMA_VERSION
        self.layout = SlotLayout(
            len(space.slot_ids), len(space.blueprints), context.history_length, version
        )
        dim = self.layout.total if slots else context.feature_dim

        # Initialise the weights from the run's seed without touching the global RNG.
        self.net: ActorCritic | SlotActorCritic
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(context.seed)
            if slots:
                self.net = SlotActorCritic(
                    self.layout,
                    space.head_sizes,
                    options.trunk,
                    options.hidden_size,
                    options.mlp_layers,
                    options.init_op_bias,
                    host_growth=self.grows_host,
                )
            else:
                self.net = ActorCritic(
                    dim,
                    space.head_sizes,
                    options.trunk,
                    options.hidden_size,
                    options.mlp_layers,
                    options.init_op_bias,
                    host_growth=self.grows_host,
                )
            self.net.to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(context.seed)
        self.shuffle_generator = torch.Generator().manual_seed(context.seed + SHUFFLE_SEED_OFFSET)
        self.obs_normalizer: ObservationNormalizer | SlotObservationNormalizer = (
            SlotObservationNormalizer(self.layout, options.obs_clip, options.normalize_observations)
            if slots
            else ObservationNormalizer(dim, options.obs_clip, options.normalize_observations)
        )
        self.feature_dim = dim
        self.reward_normalizer = RewardNormalizer(
            n_envs, context.gamma, options.reward_clip, options.normalize_rewards
        )
        self.learner = PPOLearner(
            self.net,
            options,
            gamma=context.gamma,
            total_updates=context.total_updates,
            generator=self.shuffle_generator,
        )
        self.recurrent_state = self.net.initial_state(n_envs)
        self.buffer = RolloutBuffer.allocate(
            n_envs,
            n_steps,
            dim,
            self.net.head_sizes,
            self.recurrent_state[0].shape[1],
            self.device,
            host_growth=self.grows_host,
        )
        self.growth = HostGrowthChoice(options, n_envs, self.device)
        self.segment_start = torch.ones(n_envs, dtype=torch.bool, device=self.device)
        self.updates_done = 0
        self.training = False
        self._used_table = used_heads_table(self.device)
        self._rollout_started: float | None = None
        if trained is not None:  # evaluation or init_from: weights and feature statistics
            self._load_network(*trained)

    # ------------------------------------------------------------ Policy

    def set_training(self, training: bool) -> None:
        self.training = training

    def reset(self, env_indices: Sequence[int]) -> None:
        rows = self._rows(env_indices)
        for part in self.recurrent_state:
            part[rows] = 0.0
        self.segment_start[rows] = True
        self.growth.reset(rows)

    def online_host_growths(self) -> list[HostGrowthSpec]:
        """The host growths it may ask for (``GrowsHostOnline``; auto: either)."""
        return self.growth.declared()

    def _rows(self, env_indices: Sequence[int]) -> torch.Tensor:
        rows = torch.as_tensor(list(env_indices), dtype=torch.long, device=self.device)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self.context.n_envs):
            raise ValueError(f"env indices {list(env_indices)} outside [0, {self.context.n_envs})")
        return rows

    def _features(self, observations: Sequence[Observation]) -> torch.Tensor:
        raw = raw_features(observations, self.context, self.options.network, self.layout.version)
        if raw.shape[1] != self.feature_dim:
            raise ValueError(
                f"observations have {raw.shape[1]} features, the policy expects {self.feature_dim}"
            )
        return raw.to(self.device)

    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[Action]:
        """Sample each head and, while training, record the step; or take each head's most
        likely choice: when ``greedy`` (never recorded), or outside training when the
        ``deterministic`` option says so."""
        rows = self._rows([o.env_index for o in observations])
        raw = self._features(observations)
        obs = self.obs_normalizer.normalize(raw)  # frozen statistics during a rollout
        masks = BatchMasks.stack(
            [masks_before(o, self.options.min_epoch) for o in observations],
            self.growth.masks(observations, rows),
            sizes=self.net.head_sizes,  # a smaller host's masks padded with illegal choices
        ).map(lambda m: m.to(self.device))
        state = (self.recurrent_state[0][rows], self.recurrent_state[1][rows])
        deterministic = greedy or (self.options.deterministic and not self.training)
        with torch.no_grad():
            features, next_state = self.net.step(obs, state)
            out = run_heads(
                self.net,
                features,
                masks,
                generator=self.generator,
                deterministic=deterministic,
                used_table=self._used_table,
            )
            values = self.net.value(features)
        if deterministic:
            out = self.growth.median_moment(out, masks, rows)
        if self.training and not greedy:
            if self._rollout_started is None:
                self._rollout_started = time.perf_counter()
            self.buffer.add_actions(
                rows,
                obs=obs,
                raw_obs=raw,
                actions=out.actions,
                log_probs=out.log_probs,
                values=values,
                masks=masks,
                starts=self.segment_start[rows],
                state=state,
                groups=step_groups(observations, self.options.advantage_groups, self.device),
            )
        self.recurrent_state[0][rows] = next_state[0]
        self.recurrent_state[1][rows] = next_state[1]
        self.segment_start[rows] = False
        # Each action's why in the policy's own terms (Action.reason): how likely it was
        # under the policy and the value the critic puts on the state.
        how = "greedy" if deterministic else "sampled"
        chance = out.log_probs.sum(dim=1).exp()
        numbers = torch.stack([chance, values.reshape(len(rows), -1)[:, 0]], dim=1).tolist()
        actions = []
        for obs, row, a, (p, v) in zip(
            observations, rows.tolist(), out.actions.tolist(), numbers, strict=True
        ):
            action = Action.from_indices(a[: len(HEADS)]).because(
                f"PPO {how}: probability {p:.2f}, value {v:+.3f}"
            )
            actions.append(self.growth.apply(action, a[len(HEADS) :], obs, row))
        return actions

    def observe(self, results: Sequence[StepResult]) -> None:
        rows = self._rows([r.env_index for r in results])
        terminals = torch.tensor([r.terminal for r in results], device=self.device).bool()
        if self.training:
            rewards = torch.tensor(
                [r.reward for r in results], dtype=torch.float32, device=self.device
            )
            self.buffer.add_outcomes(rows, rewards, terminals)
        # A terminal (episode end or governor rollback) starts a new segment: no memory
        # carries across it.
        ended = rows[terminals]
        for part in self.recurrent_state:
            part[ended] = 0.0
        self.segment_start[ended] = True

    # ------------------------------------------------------------ Trainable

    def begin_rollout(self, observations: Sequence[Observation]) -> None:
        self.buffer.clear()
        self._rollout_started = time.perf_counter()

    def update(self, last_observations: Sequence[Observation]) -> dict[str, float]:
        buffer = self.buffer
        if not buffer.full:
            raise RuntimeError(f"update() after {buffer.step} of {buffer.n_steps} rollout steps")
        rollout_time = time.perf_counter() - (self._rollout_started or time.perf_counter())
        with torch.no_grad():
            last_values = torch.zeros(self.context.n_envs, device=self.device)
            if last_observations:
                rows = self._rows([o.env_index for o in last_observations])
                obs = self.obs_normalizer.normalize(self._features(last_observations))
                state = (self.recurrent_state[0][rows], self.recurrent_state[1][rows])
                features, _ = self.net.step(obs, state)
                last_values[rows] = self.net.value(features)
        raw_rewards = buffer.rewards.clone()
        rewards = self.reward_normalizer.normalize_rollout(raw_rewards, buffer.terminals)
        diagnostics = self.learner.update(buffer, rewards, last_values, self.updates_done)
        # Unfreeze: the next rollout acts with statistics that include this one.
        self.obs_normalizer.update(buffer.raw_obs.flatten(0, 1))
        self.updates_done += 1
        samples = buffer.n_envs * buffer.n_steps
        diagnostics.update(
            {
                "reward_mean": float(raw_rewards.mean()),
                "reward_scale": self.reward_normalizer.std
                if self.options.normalize_rewards
                else 1.0,
                "segments_ended": float(buffer.terminals.sum()),
                "rollout_sps": samples / rollout_time if rollout_time > 0 else 0.0,
                "update_sps": samples
                * diagnostics["epochs_run"]
                / max(diagnostics["update_time"], 1e-9),
            }
        )
        buffer.clear()
        self._rollout_started = None
        return diagnostics

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        ctx = self.context
        return {
            "kind": STATE_KIND,
            "version": STATE_VERSION,
            "options": unstructure(self.options),
            "task": ctx.task,
            "space": space_to_dict(ctx.space),
            "feature_dim": ctx.feature_dim,
            "history_length": ctx.history_length,
            # What the slots network reads, whatever the host: compat checks it instead
            # of the vocabulary and the flat feature size.
            "feature_schema": schema(ctx.history_length, self.layout.version),
            "network": {k: v.detach().clone() for k, v in self.net.state_dict().items()},
            "optimizer": self.learner.optimizer.state_dict(),
            "obs_normalizer": self.obs_normalizer.state_dict(),
            "reward_normalizer": self.reward_normalizer.state_dict(),
            "generator": self.generator.get_state(),
            "shuffle_generator": self.shuffle_generator.get_state(),
            "updates_done": self.updates_done,
            "buffer": self.buffer.state_dict(),
            "recurrent_state": [part.clone() for part in self.recurrent_state],
            "segment_start": self.segment_start.clone(),
            **self.growth.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state of THIS run exactly (resume); see ``ppo:PATH`` for evaluation."""
        source = "the policy state of the checkpoint"
        ctx = self.context
        check_compatible(state, ctx.space, ctx.feature_dim, source, ctx.task, ctx.history_length)
        if self.options.network == "slots" and schema_version(state) != self.layout.version:
            raise CheckpointError(
                f"{source} was trained on slot-feature schema {schema_version(state)}, this run "
                f"reads {self.layout.version}; resume it with the esper-tamiyo-ppo it began with"
            )
        ours = unstructure(self.options)
        saved = saved_model_fields(state)
        differ = [
            f"policies.ppo.{k}: checkpoint {saved[k]!r}, this run {ours[k]!r}"
            for k in MODEL_FIELDS
            if saved[k] != ours[k]
        ]
        if differ:
            raise CheckpointError(f"{source} has another network: " + "; ".join(differ))
        self._load_network(state, source)
        try:
            self.learner.optimizer.load_state_dict(state["optimizer"])
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
            self.buffer.load_state_dict(state["buffer"])
        except (ValueError, KeyError, RuntimeError) as exc:
            raise CheckpointError(
                f"{source} was written by a run with other settings (envs, epochs or options): {exc}"
            ) from None
        self.generator.set_state(state["generator"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
        self.updates_done = int(state["updates_done"])
        for part, saved in zip(self.recurrent_state, state["recurrent_state"], strict=True):
            part.copy_(saved)
        self.segment_start.copy_(state["segment_start"])
        self.growth.load_state_dict(state)

    def _load_network(self, state: dict[str, Any], source: str) -> None:
        check_state_values(state, source)  # every load comes here: ppo:PATH, init_from, resume
        try:
            self.net.load_state_dict(state["network"])
        except RuntimeError as exc:
            raise CheckpointError(
                f"{source}: its network does not fit ({state['options'].get('trunk')} trunk, "
                f"hidden_size {state['options'].get('hidden_size')}): {exc}"
            ) from None
        self.obs_normalizer.load_state_dict(state["obs_normalizer"])
