"""What growing the host itself reads and writes of an env, and the events it tells:
narrow protocols (``MorphogeneticEnv`` and ``StepEvents`` are ones), so the helpers of
:mod:`esper_core.env.host_growth` and :mod:`esper_core.env.host_growth_online` take what
they need, not the env, and stay out of the circle of modules around it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from esper_core.components.blueprint import Blueprint
    from esper_core.components.growth_operator import GrowthOperator
    from esper_core.components.growth_request import HostGrowthSpec
    from esper_core.config import RunConfig
    from esper_core.env.training import Trainer
    from esper_core.lifecycle.actions import ActionSpace
    from esper_core.lifecycle.governor import Governor
    from esper_core.lifecycle.host_growth import HostGrowth
    from esper_core.lifecycle.model import MorphogeneticModel
    from esper_core.lifecycle.stages import Stage


class HostCount(Protocol):
    """What a host growth's events read of an env: the model (its growths, in order) and
    the host's parameter count as the env last counted it."""

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def host_params(self) -> int: ...


class Checking(Protocol):
    """What checking a host growth reads of an env: its host, its operators, its
    schedule and the run's length."""

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def operators(self) -> Mapping[str, GrowthOperator]: ...

    @property
    def max_epochs(self) -> int: ...

    @property
    def host_growth_specs(self) -> Sequence[HostGrowthSpec]: ...


class Growing(Checking, Protocol):
    """What starting, ticking, pruning and replaying a host growth reads and writes of an
    env: the epoch (a replay sets it), the host's count and the slot table it renews."""

    epoch: int
    host_params: int
    fits: torch.Tensor

    @property
    def seed(self) -> int: ...

    @property
    def trainer(self) -> Trainer: ...

    @property
    def governor(self) -> Governor: ...

    @property
    def space(self) -> ActionSpace: ...

    @property
    def blueprints(self) -> Mapping[str, Blueprint]: ...


class Requesting(Growing, Protocol):
    """An env a policy's growth request reaches: also its run's config (whose policy asks)."""

    @property
    def config(self) -> RunConfig: ...


class GrowthEvents(Protocol):
    """The events of a host growth (``StepEvents`` tells them)."""

    def host_growth_started(self, env: HostCount, growth: HostGrowth) -> None: ...

    def host_growth_stage(self, env: HostCount, growth: HostGrowth, before: Stage) -> None: ...

    def host_growth_fossilized(
        self, env: HostCount, growth: HostGrowth, params_before: int
    ) -> None: ...

    def host_growth_pruned(
        self, env: HostCount, growth: HostGrowth, stage: Stage, params_before: int, reason: str
    ) -> None: ...
