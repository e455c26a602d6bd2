"""Tamiyo policy protocols.

A policy component is a class with ``name``, ``description`` and an attrs ``Options``
class, constructed as ``Policy(options, context)``. It acts on the observations of
all envs at once (batched). A learnable policy also implements :class:`Trainable`,
which ``esper train`` drives: one rollout = ``episodes_per_update`` episodes of every
env (an optional integer attribute of the policy; 1 when it has none).

A policy may also say why an episode grew nothing with an optional method
``why_no_growth(env_index) -> str | None`` (e.g. "the trigger never fired"), asked when
an env's episode ends without a germination: the run summary and ``esper compare`` show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from attrs import frozen

# The growth requests live below this module and lifecycle/actions.py; named here too
# (policies import them from the policy protocols).
from esper_core.components.growth_request import DepthGrowthSpec as DepthGrowthSpec
from esper_core.components.growth_request import HostGrowthSpec as HostGrowthSpec
from esper_core.components.growth_request import WidthGrowthSpec as WidthGrowthSpec

if TYPE_CHECKING:  # the env modules import torch; a plugin's import must stay light
    from esper_core.lifecycle.actions import Action, ActionSpace
    from esper_core.step_values import Observation, StepResult


@frozen
class PolicyContext:
    """What a policy may know about the run it controls."""

    space: ActionSpace
    feature_dim: int
    history_length: int
    max_epochs: int
    n_envs: int
    task: str
    topology: str
    gamma: float
    seed: int
    device: str = "cpu"
    total_updates: int = 0  # for schedules (learning-rate decay, entropy annealing)
    argument: str | None = None  # the part after ":" in --policy NAME:ARG (e.g. a checkpoint)
    # Training: envs that share each episode's random seed (train.seed_group); 1 otherwise.
    seed_group: int = 1


@runtime_checkable
class Policy(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    def reset(self, env_indices: Sequence[int]) -> None:
        """New episodes begin in these envs: forget their per-episode memory."""
        ...

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        """One action per observation; ``observations[i].env_index`` says which env."""
        ...

    def observe(self, results: Sequence[StepResult]) -> None:
        """The outcome of the last actions (rewards, terminal flags, refusals)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class InstallsAtBirth(Protocol):
    """Optional: a policy whose architecture is fixed before training starts.

    The session hands :meth:`birth_seeds` to every env once, before the first reset;
    each env then installs those seeds as fossils at the start of every episode
    (``MorphogeneticEnv.install_at_birth``)."""

    def birth_seeds(self) -> Sequence[str]:
        """``blueprint@slot`` seeds, e.g. ``["conv_heavy@r0c0"]``."""
        ...


@runtime_checkable
class SchedulesHostGrowth(Protocol):
    """Optional: a policy that grows the host itself on a schedule.

    The session hands :meth:`host_growths` to every env once, before the first reset;
    each env applies them at the epochs they name in every episode
    (``MorphogeneticEnv.schedule_host_growth``)."""

    def host_growths(self) -> Sequence[HostGrowthSpec]: ...


@runtime_checkable
class GrowsHostOnline(Protocol):
    """Optional: a policy that chooses while the run goes on when (and how) the host itself
    grows, rather than on a schedule.

    It asks with an action: ``Action(..., host_growth=spec)`` starts ``spec`` at once,
    before the epoch the action trains, exactly as a growth scheduled for that epoch
    starts (its ``at`` must name it: ``observation.epoch / observation.max_epochs``). A
    request the env cannot honour (a growth still in flight, a seed where the width
    changes, past the last epoch) is a ConfigError: the policy checks first. The session
    checks what :meth:`online_host_growths` declares against the host before the run
    starts, so a host that cannot grow so fails at once, in one line; a policy whose
    ``host_growth_where_possible`` is true (the heuristic's growth is a default) trains
    such a host without host growth instead (its observations declare none)."""

    def online_host_growths(self) -> Sequence[HostGrowthSpec]:
        """Every growth the policy may ask for (their ``at`` is not read); none: it never
        asks."""
        ...


def grows_host(policy: object) -> bool:
    """Whether ``policy`` grows the host itself, on a schedule or when it chooses."""
    if isinstance(policy, SchedulesHostGrowth) and policy.host_growths():
        return True
    return isinstance(policy, GrowsHostOnline) and bool(policy.online_host_growths())


@runtime_checkable
class Trainable(Policy, Protocol):
    def begin_rollout(self, observations: Sequence[Observation]) -> None:
        """A rollout starts; the observation normaliser is frozen until :meth:`update`."""
        ...

    def update(self, last_observations: Sequence[Observation]) -> dict[str, float]:
        """Learn from the finished rollout; return diagnostics for telemetry."""
        ...

    def set_training(self, training: bool) -> None:
        """Explore and record transitions (True) or act for evaluation (False)."""
        ...

    def act_greedily(self, observations: Sequence[Observation]) -> list[Action]:
        """The policy's most likely action for each observation, recording nothing: what
        the greedy evaluation during training plays (between updates, not training)."""
        ...


def check_trainable(cls: type, policy: str) -> None:
    """Refuse a policy class that cannot learn, known from the class alone, so ``esper
    train`` refuses it before it builds envs or a run directory. (``issubclass`` cannot
    test a protocol with class-variable members, so the methods are named here.)"""
    members = ("begin_rollout", "update", "set_training", "act_greedily")
    if not all(callable(getattr(cls, member, None)) for member in members):
        from esper_core.errors import ConfigError

        raise ConfigError([f"run.policy: {policy!r} is not trainable; try --policy ppo"])
