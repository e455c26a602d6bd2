"""Executors own *how* N envs train one epoch; the env owns *what* an epoch is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from attrs import define

from esper_core.hookspecs import hookimpl

if TYPE_CHECKING:  # torch stays unimported until an executor actually steps
    from esper_core.actions import Action
    from esper_core.env import MorphogeneticEnv
    from esper_core.step import StepResult


@runtime_checkable
class Executor(Protocol):
    """Constructed as ``Executor(options, config)``; steps every env one epoch."""

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    def env_devices(self, n_envs: int) -> list[str]:
        """The device of each env (executors that spread envs over devices decide here)."""
        ...

    def step(self, envs: Sequence[MorphogeneticEnv], actions: Sequence[Action]) -> list[StepResult]: ...

    def close(self) -> None: ...


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
        self.device = config.run.device if config is not None else "cpu"

    def env_devices(self, n_envs: int) -> list[str]:
        return [self.device] * n_envs

    def step(self, envs: Sequence[MorphogeneticEnv], actions: Sequence[Action]) -> list[StepResult]:
        from esper_core.env import run_epoch

        if len(envs) != len(actions):
            raise ValueError(f"{len(actions)} actions for {len(envs)} envs")
        return [run_epoch(env, action) for env, action in zip(envs, actions)]

    def close(self) -> None:
        pass


@hookimpl
def esper_register_executors(register: Any) -> None:
    register(SerialExecutor)
