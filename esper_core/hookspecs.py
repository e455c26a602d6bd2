"""Every hook an Esper plugin can implement.

Hooks follow the register-callback pattern of simonw/llm: a plugin receives a
``register`` function and calls it once per component it provides. The callback
records which plugin registered what, so duplicates and failures can be reported
by plugin name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("esper")
hookimpl = pluggy.HookimplMarker("esper")

Register = Callable[[Any], None]


@hookspec
def esper_register_tasks(register: Register) -> None:
    """Register task classes (datasets + host presets), e.g. ``register(DigitsTask)``."""


@hookspec
def esper_register_blueprints(register: Register) -> None:
    """Register ``esper_core.components.blueprint.Blueprint`` values."""


@hookspec
def esper_register_operators(register: Register) -> None:
    """Register growth operators: values that implement
    ``esper_core.components.growth_operator.GrowthOperator`` (they grow the host itself)."""


@hookspec
def esper_register_rewards(register: Register) -> None:
    """Register reward family classes."""


@hookspec
def esper_register_policies(register: Register) -> None:
    """Register Tamiyo policy classes."""


@hookspec
def esper_register_telemetry(register: Register) -> None:
    """Register telemetry backend classes."""


@hookspec
def esper_register_executors(register: Register) -> None:
    """Register executor classes."""


@hookspec
def esper_register_runners(register: Register) -> None:
    """Register cell-runner classes: where the cells of ``esper compare`` run."""


@hookspec
def esper_register_commands(cli: Any) -> None:
    """Add click commands to the ``esper`` group: ``cli.add_command(...)``."""
