"""A contextual-bandit env that speaks the env protocol of the runner and executors,
contexts for building policies, and a driver that mirrors ``esper_core.run.loops.TrainLoop``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import torch
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy

from esper_core.components.policy import PolicyContext
from esper_core.env.observation import Observation, feature_dim
from esper_core.env.step import EpochMetrics, StepResult
from esper_core.lifecycle.actions import OPS, Action, ActionMasks, ActionSpace, LifecycleOp
from esper_core.lifecycle.slot import SlotReport
from esper_core.lifecycle.stages import Stage
from esper_core.run.executor import SerialExecutor

SPACE = ActionSpace(
    slot_ids=("r0c0", "r0c1"),
    blueprints=("cnn/a", "cnn/b", "cnn/c"),
    styles=("linear_add", "gated"),
    tempos=(3, 5, 8),
    alpha_targets=(0.5, 1.0),
)
HISTORY = 2
# Context k is shown as slot r0c0's stage; the op that pays 1 in context k (others pay 0).
CONTEXT_STAGES = (Stage.DORMANT, Stage.TRAINING, Stage.BLENDING)
PAYING_OPS = (LifecycleOp.WAIT, LifecycleOp.GERMINATE, LifecycleOp.ADVANCE)


def context(
    n_envs: int = 4,
    max_epochs: int = 8,
    seed: int = 0,
    gamma: float = 0.9,
    total_updates: int = 0,
    argument: str | None = None,
    space: ActionSpace = SPACE,
    seed_group: int = 1,
) -> PolicyContext:
    return PolicyContext(
        space=space,
        feature_dim=feature_dim(space, HISTORY),
        history_length=HISTORY,
        max_epochs=max_epochs,
        n_envs=n_envs,
        task="bandit",
        topology="cnn",
        gamma=gamma,
        seed=seed,
        total_updates=total_updates,
        argument=argument,
        seed_group=seed_group,
    )


def make_policy(options: PPOOptions | None = None, **ctx: Any) -> PPOPolicy:
    """A policy on the bandit space; with no checkpoint and no updates (what most unit tests
    build) it is an untrained evaluator, which the tests allow explicitly."""
    options = options or PPOOptions()
    if not ctx.get("argument"):
        options = attrs.evolve(options, allow_untrained=True)
    return PPOPolicy(options, context(**ctx))


def _report(slot_id: str, stage: Stage) -> SlotReport:
    return SlotReport(
        slot_id=slot_id,
        stage=stage,
        seed_id=None,
        blueprint=None,
        style=None,
        alpha=0.0,
        alpha_target=0.0,
        epochs_in_stage=0,
        epochs_total=0,
        contribution=None,
        contribution_velocity=0.0,
        gradient_health=None,
        grad_ratio=None,
        seed_params=0,
        acc_at_stage_start=0.0,
        acc_at_germination=0.0,
        cooldown_left=0,
    )


def bandit_masks(space: ActionSpace = SPACE) -> ActionMasks:
    """WAIT, GERMINATE (slot r0c0 only) and ADVANCE (slot r0c1 only) are legal; nothing else."""
    n_slots = len(space.slot_ids)
    slot = torch.zeros(len(OPS), n_slots, dtype=torch.bool)
    slot[LifecycleOp.WAIT] = True
    slot[LifecycleOp.GERMINATE, 0] = True
    slot[LifecycleOp.ADVANCE, 1] = True
    return ActionMasks(
        op=slot.any(dim=1),
        slot=slot,
        blueprint=torch.ones(n_slots, len(space.blueprints), dtype=torch.bool),
        style=torch.ones(len(space.styles), dtype=torch.bool),
        tempo=torch.ones(len(space.tempos), dtype=torch.bool),
        alpha_target=torch.zeros(n_slots, len(space.alpha_targets), dtype=torch.bool),
    )


class BanditEnv:
    """Each step shows a random context; the op it names pays 1. ``rollback_at`` epochs
    end a segment like a governor rollback (terminal, not done)."""

    def __init__(
        self, env_index: int, max_epochs: int = 8, rollback_at: Sequence[int] = ()
    ) -> None:
        self.env_index = env_index
        self.max_epochs = max_epochs
        self.space = SPACE
        self.rollback_at = set(rollback_at)
        self.masks = bandit_masks()

    def _observe(self) -> Observation:
        stage = CONTEXT_STAGES[self.context]
        return Observation(
            env_index=self.env_index,
            epoch=self.epoch,
            max_epochs=self.max_epochs,
            val_loss=1.0,
            val_acc=50.0,
            train_loss=1.0,
            train_acc=50.0,
            chance_loss=1.0,
            loss_history=(1.0,),
            acc_history=(50.0,),
            plateau_epochs=0,
            best_acc=50.0,
            epochs_since_prune=10_000,
            host_params=100,
            seed_params=0,
            slots=(_report("r0c0", stage), _report("r0c1", Stage.DORMANT)),
            gates=(None, None),
            masks=self.masks,
        )

    def _draw(self) -> None:
        self.context = int(torch.randint(len(CONTEXT_STAGES), (1,), generator=self.generator))

    def reset(self, seed: int | None = None, episode: int = 0) -> Observation:
        self.generator = torch.Generator().manual_seed(seed if seed is not None else self.env_index)
        self.epoch = 0
        self._draw()
        self._observation = self._observe()
        return self._observation

    @property
    def observation(self) -> Observation:
        return self._observation

    # The epoch protocol of esper_core.env.env.run_epoch and the executors.
    def apply_action(self, action: Action) -> None:
        self.action = action

    def begin_epoch(self) -> None:
        pass

    def train_batches(self) -> Iterator[Any]:
        return iter(())

    def train_batch(self, batch: Any) -> None:
        pass

    def end_epoch(self) -> StepResult:
        reward = 1.0 if self.action.op == PAYING_OPS[self.context] else 0.0
        self.epoch += 1
        rolled_back = self.epoch in self.rollback_at
        done = self.epoch >= self.max_epochs
        self._draw()
        self._observation = self._observe()
        return StepResult(
            env_index=self.env_index,
            observation=self._observation,
            reward=reward,
            reward_components={"bandit": reward},
            done=done,
            terminal=done or rolled_back,
            metrics=EpochMetrics(1.0, 50.0, 1.0, 50.0, None, None, 0.0, 0),
            rolled_back=rolled_back,
        )


def rollout_episodes(policy: Any) -> int:
    """Episodes per rollout of a PPOPolicy or of the registered PPO component."""
    front = getattr(policy, "episodes_per_update", None)
    return int(front) if front is not None else int(policy.options.rollout_episodes)


def run_updates(
    policy: PPOPolicy, envs: Sequence[BanditEnv], updates: int, first: int = 0
) -> tuple[list[dict[str, float]], list[float]]:
    """Train like ``esper train`` does; return each update's diagnostics and optimal-action rate."""
    executor = SerialExecutor()
    policy.set_training(True)
    diagnostics, optimal = [], []
    for update in range(first, first + updates):
        rewards = []
        for episode in range(rollout_episodes(policy)):
            seed = 1000 * update + 100 * episode
            observations = [env.reset(seed + i, update) for i, env in enumerate(envs)]
            policy.reset(list(range(len(envs))))
            if episode == 0:
                policy.begin_rollout(observations)
            for _ in range(envs[0].max_epochs):
                actions = policy.act(observations)
                results = executor.step(envs, actions)  # type: ignore[arg-type]
                policy.observe(results)
                rewards.extend(r.reward for r in results)
                observations = [r.observation for r in results]
        optimal.append(sum(rewards) / len(rewards))
        diagnostics.append(policy.update(observations))
    return diagnostics, optimal


def collect_rollout(
    policy: PPOPolicy, envs: Sequence[BanditEnv], seed: int = 0
) -> list[Observation]:
    """Fill the policy's buffer with one rollout; return the last observations."""
    executor = SerialExecutor()
    policy.set_training(True)
    for episode in range(rollout_episodes(policy)):
        observations = [env.reset(seed + 100 * episode + i) for i, env in enumerate(envs)]
        policy.reset(list(range(len(envs))))
        if episode == 0:
            policy.begin_rollout(observations)
        for _ in range(envs[0].max_epochs):
            results = executor.step(envs, policy.act(observations))  # type: ignore[arg-type]
            policy.observe(results)
            observations = [r.observation for r in results]
    return observations
