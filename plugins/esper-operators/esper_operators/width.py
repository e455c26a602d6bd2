"""The width operators: a CNN's conv stages (``cnn/width``), a transformer's residual
width ``d_model`` (``transformer/width``) and a Grower user's layer pairs
(``layers/width``). Each grows the host a ``WidthGrowthSpec`` asks for: its widths
``factor`` times as wide (the ``stages`` it names, all when empty), behind a mask."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from esper_core.components.growth_operator import GrowthSite, OperatorSample
from esper_core.components.growth_request import WidthGrowthSpec
from esper_core.components.host import (
    InjectionSpec,
    WidenableHost,
    WidenableTransformer,
    WidensItsLayers,
)
from esper_core.config_limits import MAX_HOST_WEIGHTS, MAX_WIDEN_WORK
from esper_core.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    import torch
    from torch import nn

    from esper_core.lifecycle.host_growth import GrowingModel, HostGrowth
    from esper_operators.width_layouts import WidthLayout

# Torch and the masked modules load when a host grows, not when `esper plugins` lists.


def width_problems(
    host: nn.Module, spec: WidthGrowthSpec, layout: WidthLayout | None = None
) -> list[str]:
    """A width request's problems: the factor, the cross init, the plan (stages, a
    transformer's head dimension), and the weights and FLOPs per sample it would add."""
    from esper_core.lifecycle.host_growth import GrowthError
    from esper_core.lifecycle.width_parts import CROSS_INITS
    from esper_operators.host_width import plan_by_factor, widened_weights, widening_ratio

    problems = []
    if spec.factor <= 1:
        problems.append(f"factor {spec.factor} must exceed 1 (it widens)")
    if spec.cross_init not in CROSS_INITS:
        problems.append(f"cross_init {spec.cross_init!r}; expected one of {', '.join(CROSS_INITS)}")
    if spec.factor > 1:
        try:  # the stages, and a transformer's head dimension
            plan = plan_by_factor(host, spec.factor, spec.stages, layout)
        except GrowthError as exc:
            problems.append(str(exc))
        else:
            weights = widened_weights(host, plan)
            if weights > MAX_HOST_WEIGHTS:
                problems.append(
                    f"the widened host would hold up to {weights:,} weights "
                    f"(factor {spec.factor:g}); at most {MAX_HOST_WEIGHTS:,}, as a task "
                    "builds a host: lower the factor or widen fewer stages"
                )
            work = widening_ratio(host, plan) ** 2
            if work > MAX_WIDEN_WORK:
                # The weights may fit while every later epoch takes minutes, not seconds.
                problems.append(
                    f"the widened host would train up to {work:g} x the FLOPs per "
                    f"sample of the host as built (factor {spec.factor:g}, squared), so every "
                    f"epoch after it would take that much longer; at most {MAX_WIDEN_WORK:g} x: "
                    f"choose a factor of at most {math.sqrt(MAX_WIDEN_WORK):g}"
                )
    return problems


class _Width(ABC):
    """What the width operators share: the request's checks and the growth they start;
    a subclass says which hosts it applies to and names their sites."""

    name = ""
    kind = "width"
    description = ""
    needs = ""

    @abstractmethod
    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        """The widths of ``host`` this operator grows; empty: not a host of its kind."""

    @abstractmethod
    def sample(self) -> OperatorSample:
        """A small host of its kind."""

    @property
    @abstractmethod
    def layout(self) -> WidthLayout:
        """How its hosts widen (their plan, modules and size names)."""

    def refusal(self, host: nn.Module) -> str | None:
        return None

    # A fossil keeps the widths it was born at, on the old channels of its slot; the new
    # ones pass it by (esper_core.lifecycle.slot_forward).
    keeps_fossils = True

    def problems(self, host: nn.Module, spec: Any) -> list[str]:
        return width_problems(host, spec, self.layout)

    def touches_slot(self, host: nn.Module, spec: Any, slot: InjectionSpec) -> bool:
        """Whether widening ``host`` as ``spec`` asks changes the width at ``slot``."""
        from esper_operators.host_width import plan_by_factor

        return self.layout.touches(
            plan_by_factor(host, spec.factor, spec.stages, self.layout), slot
        )

    def start(
        self,
        model: GrowingModel,
        spec: Any,
        *,
        generator: torch.Generator,
        born_epoch: int,
        replayed: Any = None,
    ) -> HostGrowth:
        from esper_operators.host_width import HostWidthGrowth, WidthPlan, plan_by_factor

        if replayed is not None:
            plan = WidthPlan(replayed.stages, replayed.channels)
        else:
            plan = plan_by_factor(model.host, spec.factor, spec.stages, self.layout)
        return HostWidthGrowth(
            model,
            plan,
            tempo=spec.tempo,
            curve=spec.curve,
            cross_init=spec.cross_init,
            generator=generator,
            born_epoch=born_epoch,
            layout=self.layout,
        )


class CNNWidth(_Width):
    name = "cnn/width"
    description = "A CNN's conv stages (and the layer reading the last one) widened, MSG-masked."
    needs = "a CNN host (esper_core.components.host.WidenableHost, such as the tasks' CNNHost)"

    @property
    def layout(self) -> WidthLayout:
        from esper_operators.width_layouts import CONV

        return CONV

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        if not isinstance(host, WidenableHost) or isinstance(
            host, (WidenableTransformer, WidensItsLayers)
        ):
            return ()
        return tuple(GrowthSite(f"stage{i}", c) for i, c in enumerate(host.stage_channels()))

    def sample(self) -> OperatorSample:
        import torch
        from esper_tasks.hosts.cnn import CNNHost

        torch.manual_seed(0)
        x = torch.randn(4, 1, 16, 16, generator=torch.Generator().manual_seed(1))
        return OperatorSample(CNNHost(1, 10, 4, 2), x, WidthGrowthSpec(at=0.0))


class TransformerWidth(_Width):
    name = "transformer/width"
    description = (
        "A transformer's residual width d_model in every module at once (heads keep their size)."
    )
    needs = "a transformer host (WidenableTransformer, such as the tasks' TransformerHost)"

    @property
    def layout(self) -> WidthLayout:
        from esper_operators.width_layouts import TRANSFORMER

        return TRANSFORMER

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        if not isinstance(host, WidenableTransformer):
            return ()
        return (GrowthSite("d_model", host.stage_channels()[0]),)

    def sample(self) -> OperatorSample:
        import torch
        from esper_tasks.hosts.transformer import TransformerHost

        torch.manual_seed(0)
        x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(1))
        return OperatorSample(TransformerHost(11, 8, 16, 2, 2, 2), x, WidthGrowthSpec(at=0.0))


class LayerWidth(_Width):
    name = "layers/width"
    description = "A Grower user's layer pairs: a producer's outputs and its one reader's inputs."
    needs = "a Grower's model with a layer pair (esper_core.widenable_layers lists them)"

    @property
    def layout(self) -> WidthLayout:
        from esper_operators.width_layouts import LAYERS

        return LAYERS

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        if not isinstance(host, WidensItsLayers):
            return ()
        return tuple(
            GrowthSite(name, c) for name, c in zip(host.stage_names(), host.stage_channels())
        )

    def refusal(self, host: nn.Module) -> str | None:
        if isinstance(host, WidensItsLayers) and not host.stage_channels():
            # A user's module with no layer pair that can widen: a plan would widen nothing.
            return host.width_refusal()
        return None

    def sample(self) -> OperatorSample:
        import torch
        from torch import nn

        from esper_core.grow.layer_growth import widenable_layers
        from esper_core.grow.module_host import host_from_module

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
        host = host_from_module(model, ["1"], x)
        report = widenable_layers(model, x)
        host.enable_width(report.pairs, report.refused)
        return OperatorSample(host, x, WidthGrowthSpec(at=0.0))


OPERATORS = (CNNWidth(), TransformerWidth(), LayerWidth())


@hookimpl
def esper_register_operators(register: Register) -> None:
    for operator in OPERATORS:
        register(operator)
