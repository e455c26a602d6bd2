"""The ``policies.ppo`` entry point: the component :class:`PPO`, built as ``PPO(options, context)``.

Importing this module must stay cheap and must not import torch (``esper plugins``
imports every plugin), so :class:`PPO` is a thin front: its constructor imports
:mod:`esper_tamiyo_ppo.policy` and builds the :class:`~esper_tamiyo_ppo.policy.PPOPolicy`
that does the work, and each method of the policy protocol hands over to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from esper_core import hookimpl
from esper_tamiyo_ppo.options import PPOOptions

if TYPE_CHECKING:
    from esper_core.components.policy import HostGrowthSpec, PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action
    from esper_tamiyo_ppo.update import GradientSync


class PPO:
    """A :class:`~esper_core.components.policy.Trainable` policy."""

    name: ClassVar[str] = "ppo"
    description: ClassVar[str] = (
        "PPO actor-critic over the factored, masked action (MLP or LSTM trunk); train with `esper train`."
    )
    Options: ClassVar[type] = PPOOptions

    def __init__(self, options: PPOOptions, context: PolicyContext) -> None:
        from esper_tamiyo_ppo.policy import PPOPolicy

        self.policy = PPOPolicy(options, context)

    @property
    def gradient_sync(self) -> GradientSync | None:
        """The distributed executor's hook: see :attr:`esper_tamiyo_ppo.update.PPOLearner.gradient_sync`."""
        return self.policy.learner.gradient_sync

    @gradient_sync.setter
    def gradient_sync(self, hook: GradientSync | None) -> None:
        self.policy.learner.gradient_sync = hook

    @property
    def shard(self) -> tuple[int, int]:
        """(rank, world): see :attr:`esper_tamiyo_ppo.update.PPOLearner.shard`."""
        return self.policy.learner.shard

    @shard.setter
    def shard(self, shard: tuple[int, int]) -> None:
        self.policy.learner.shard = shard

    @property
    def episodes_per_update(self) -> int:
        """Episodes of every env in one rollout (``rollout_episodes``): read by ``esper train``."""
        return self.policy.options.rollout_episodes

    def online_host_growths(self) -> list[HostGrowthSpec]:
        """The host growth it may ask for (``GrowsHostOnline``; host_growth off: none)."""
        return self.policy.online_host_growths()

    @property
    def host_growth_where_possible(self) -> bool:
        """auto: a host that takes one growth only is offered that one, not refused."""
        return self.policy.host_growth_where_possible

    def set_training(self, training: bool) -> None:
        self.policy.set_training(training)

    def act_greedily(self, observations: Sequence[Observation]) -> list[Action]:
        return self.policy.act(observations, greedy=True)

    def reset(self, env_indices: Sequence[int]) -> None:
        self.policy.reset(env_indices)

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        return self.policy.act(observations)

    def observe(self, results: Sequence[StepResult]) -> None:
        self.policy.observe(results)

    def begin_rollout(self, observations: Sequence[Observation]) -> None:
        self.policy.begin_rollout(observations)

    def update(self, last_observations: Sequence[Observation]) -> dict[str, float]:
        return self.policy.update(last_observations)

    def state_dict(self) -> dict[str, Any]:
        return self.policy.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state)


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(PPO)
