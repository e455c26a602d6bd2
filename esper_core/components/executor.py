"""The executor protocols: *how* N envs train one epoch (the env owns *what* an epoch is).

An executor component is a class with ``name``, ``description`` and an attrs ``Options``
class, constructed as ``Executor(options, context)`` with an :class:`ExecutorContext`
and registered through ``esper_register_executors``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from attrs import frozen

if TYPE_CHECKING:  # torch stays unimported until an executor actually steps
    import torch

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action


@frozen
class ExecutorContext:
    """What an executor may know about the run: where its envs may live."""

    device: str = "cpu"  # run.device: the device of every env (single-device executors)
    devices: tuple[str, ...] = ()  # run.devices: envs round-robin over these; () = [device]


@runtime_checkable
class Executor(Protocol):
    """Steps every env one epoch."""

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    def env_devices(self, n_envs: int) -> Sequence[torch.device]:
        """The device of each env (executors that spread envs over devices decide here)."""
        ...

    def step(
        self, envs: Sequence[MorphogeneticEnv], actions: Sequence[Action]
    ) -> list[StepResult]: ...

    def close(self) -> None: ...


@runtime_checkable
class MultiProcessExecutor(Protocol):
    """Optional extra interface of an executor whose envs live in several processes.

    Every process (rank) runs the same loop over all ``n_envs`` envs, but an env is
    built, reset, stepped and checkpointed only by the rank that owns it; these hooks are
    where the ranks exchange what the others need. Each hook but ``build_envs`` is a
    collective: every rank calls it at the same point of the loop.
    """

    is_writer: bool  # this rank writes the run directory (telemetry, checkpoints, summary)

    def build_envs(self, n_envs: int, build: Callable[[int], MorphogeneticEnv]) -> list[Any]:
        """This rank's envs made with ``build(index)``, and a light stand-in for each env of
        another rank (it knows its index, action space, task and epochs per episode)."""
        ...

    def observations(self, envs: Sequence[MorphogeneticEnv]) -> list[Observation]:
        """Every env's current observation, from its owner (a run resumed mid-episode)."""
        ...

    def bind_policy(self, policy: Any, training: bool) -> None:
        """Make the policy identical on every rank (and, when training, keep it so)."""
        ...

    def reset_envs(
        self, envs: Sequence[MorphogeneticEnv], seeds: Sequence[int], episode: int
    ) -> list[Observation]:
        """Reset the envs this rank owns; return the first observation of every env."""
        ...

    def env_states(self, envs: Sequence[MorphogeneticEnv]) -> list[dict[str, Any]] | None:
        """Every env's ``state_dict()`` on the writer (for its checkpoint), None elsewhere."""
        ...

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (e.g. a stop request)."""
        ...
