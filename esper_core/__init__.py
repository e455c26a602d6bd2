"""Esper core: seed lifecycle, slots, the environment loop and the plugin protocols.

A plugin imports what it needs from here alone: the ``hookimpl`` marker, the component
protocols, the context each kind of component is constructed with
(``cls(options, context)``) and the values those protocols exchange. Every name but
``hookimpl`` loads on first use (PEP 562), so importing a plugin module stays cheap and
never imports torch (``esper --help`` stays fast). The library API, growth in the
user's own model and loop, is here too: :class:`Grower`, :func:`host_from_module` and
:func:`widenable_layers`.
"""

from typing import TYPE_CHECKING, Any

from esper_core.hookspecs import hookimpl
from esper_core.version import __version__

if TYPE_CHECKING:
    from esper_core.components.blueprint import Blueprint
    from esper_core.components.executor import Executor, ExecutorContext
    from esper_core.components.host import HostProtocol, InjectionSpec
    from esper_core.components.policy import Policy, PolicyContext, Trainable
    from esper_core.components.reward import (
        RewardBreakdown,
        RewardContext,
        RewardFamily,
        RewardSetup,
    )
    from esper_core.components.task import (
        BatchMetrics,
        MeasuredCost,
        Task,
        TaskContext,
        TaskData,
        TrainingWork,
    )
    from esper_core.components.telemetry import TelemetryBackend, TelemetryContext
    from esper_core.config import RunConfig
    from esper_core.env.observation import Observation
    from esper_core.grow.grower import Grower, GrowthDecision
    from esper_core.grow.layer_growth import widenable_layers
    from esper_core.grow.module_host import host_from_module
    from esper_core.lifecycle.actions import Action, LifecycleOp
    from esper_core.lifecycle.stages import Stage

_HOMES = {
    "esper_core.components.blueprint": ["Blueprint"],
    "esper_core.components.executor": ["Executor", "ExecutorContext"],
    "esper_core.components.host": ["HostProtocol", "InjectionSpec"],
    "esper_core.components.policy": ["Policy", "PolicyContext", "Trainable"],
    "esper_core.components.reward": [
        "RewardBreakdown",
        "RewardContext",
        "RewardFamily",
        "RewardSetup",
    ],
    "esper_core.components.task": [
        "BatchMetrics",
        "MeasuredCost",
        "Task",
        "TaskContext",
        "TaskData",
        "TrainingWork",
    ],
    "esper_core.components.telemetry": ["TelemetryBackend", "TelemetryContext"],
    "esper_core.config": ["RunConfig"],
    "esper_core.env.observation": ["Observation"],  # imports torch
    # The library API: growth in the user's own model and loop (imports torch).
    "esper_core.grow.grower": ["Grower", "GrowthDecision"],
    "esper_core.grow.module_host": ["host_from_module"],
    "esper_core.grow.layer_growth": ["widenable_layers"],
    "esper_core.lifecycle.actions": ["Action", "LifecycleOp"],
    "esper_core.lifecycle.stages": ["Stage"],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'esper_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_OF])


__all__ = [
    "Action",
    "BatchMetrics",
    "Blueprint",
    "Executor",
    "ExecutorContext",
    "Grower",
    "GrowthDecision",
    "HostProtocol",
    "InjectionSpec",
    "LifecycleOp",
    "MeasuredCost",
    "Observation",
    "Policy",
    "PolicyContext",
    "RewardBreakdown",
    "RewardContext",
    "RewardFamily",
    "RewardSetup",
    "RunConfig",
    "Stage",
    "Task",
    "TaskContext",
    "TaskData",
    "TelemetryBackend",
    "TelemetryContext",
    "Trainable",
    "TrainingWork",
    "__version__",
    "hookimpl",
    "host_from_module",
    "widenable_layers",
]
