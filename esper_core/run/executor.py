"""The core executor: envs one after another, the reference every other executor matches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core.components.executor import ExecutorContext
from esper_core.hookspecs import hookimpl

if TYPE_CHECKING:
    import torch

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action


@define
class SerialOptions:
    pass


class SerialExecutor:
    """Envs one after another: the reference semantics every executor must match."""

    name: ClassVar[str] = "serial"
    description: ClassVar[str] = "Steps envs one after another on one device (reference semantics)."
    Options: ClassVar[type] = SerialOptions

    def __init__(
        self, options: SerialOptions | None = None, context: ExecutorContext | None = None
    ) -> None:
        self.options = options or SerialOptions()
        self.device = (context or ExecutorContext()).device

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
