"""Executors own *how* N envs train one epoch; the env owns *what* an epoch is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from attrs import define

from esper_core.hookspecs import hookimpl

if TYPE_CHECKING:  # torch stays unimported until an executor actually steps
    import torch

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action


@runtime_checkable
class Executor(Protocol):
    """Constructed as ``Executor(options, config)``; steps every env one epoch."""

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

    Every process (rank) runs the same runner loop over all ``n_envs`` envs, but an
    env is reset, stepped and checkpointed only by the rank that owns it; these hooks
    are where the ranks exchange what the others need. Each hook is a collective:
    every rank calls it at the same point of the loop.
    """

    is_writer: bool  # this rank writes the run directory (telemetry, checkpoints, summary)

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


@define
class SerialOptions:
    pass


class SerialExecutor:
    """Envs one after another: the reference semantics every executor must match."""

    name: ClassVar[str] = "serial"
    description: ClassVar[str] = "Steps envs one after another on one device (reference semantics)."
    Options: ClassVar[type] = SerialOptions

    def __init__(self, options: SerialOptions | None = None, config: Any = None) -> None:
        self.options = options or SerialOptions()
        self.device: str = config.run.device if config is not None else "cpu"

    def env_devices(self, n_envs: int) -> list[torch.device]:
        from esper_core.env.device import canonical_device

        return [canonical_device(self.device)] * n_envs

    def step(self, envs: Sequence[MorphogeneticEnv], actions: Sequence[Action]) -> list[StepResult]:
        from esper_core.env.env import run_epoch

        if len(envs) != len(actions):
            raise ValueError(f"{len(actions)} actions for {len(envs)} envs")
        return [run_epoch(env, action) for env, action in zip(envs, actions)]

    def close(self) -> None:
        pass


@hookimpl
def esper_register_executors(register: Any) -> None:
    register(SerialExecutor)
