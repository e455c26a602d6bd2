"""``inner/width``: widen only the layer pairs that sit inside one submodule of a user's
model (an MLP block's hidden width, a residual block's bottleneck); the widths between
submodules, which other parts of the model read, keep their size.

It narrows the installed ``layers/width`` operator (esper-operators): it picks the
pairs, and ``layers/width`` installs them behind the mask, ramps, folds and prunes, so
the lifecycle every operator shares (bit for bit at birth, the fold, exact resume) is
the core's, not this file's. It grows only where a request names it
(``policies.static.widen_operator = "inner/width"``): installing it changes nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from esper_core import hookimpl
from esper_core.components.growth_operator import GrowthOperator, GrowthSite, OperatorSample
from esper_core.components.growth_request import WidthGrowthSpec
from esper_core.components.host import WidensItsLayers

if TYPE_CHECKING:
    import torch
    from torch import nn

    from esper_core.hookspecs import Register
    from esper_core.lifecycle.host_growth import GrowingModel, HostGrowth

NARROWED = "layers/width"


def _parent(layer: str) -> str:
    return layer.rpartition(".")[0]


def inner_pairs(host: nn.Module) -> tuple[int, ...]:
    """The indices of the host's layer pairs whose two layers share a submodule (not the
    model itself): ``body.0 -> body.2`` is one, ``body.2 -> head`` is not."""
    if not isinstance(host, WidensItsLayers):
        return ()
    inner = []
    for i, name in enumerate(host.stage_names()):
        producer, _, consumer = name.partition(" -> ")
        if _parent(producer) and _parent(producer) == _parent(consumer):
            inner.append(i)
    return tuple(inner)


class InnerWidth:
    name = "inner/width"
    kind = "width"
    description = "A user's layer pairs inside one submodule (an MLP's hidden width) only."
    needs = (
        "a Grower's model with a layer pair inside a submodule (producer and consumer "
        "in the same block; esper_core.widenable_layers lists the pairs)"
    )
    by_name_only = True  # an unnamed request keeps growing what layers/width grows

    def __init__(self) -> None:
        self._layers: GrowthOperator | None = None

    def _narrowed(self) -> GrowthOperator:
        """The installed ``layers/width``, through the plugin registry (not its module:
        where esper-operators keeps its code is its own business)."""
        if self._layers is None:
            from esper_core.plugins import PluginManager

            pm = PluginManager(extra=["operators.width"], autoload=False)
            self._layers = pm.registry("operators").get(NARROWED)
        return self._layers

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        if not isinstance(host, WidensItsLayers):
            return ()
        names, channels = host.stage_names(), host.stage_channels()
        return tuple(GrowthSite(names[i], channels[i]) for i in inner_pairs(host))

    def refusal(self, host: nn.Module) -> str | None:
        return None

    def _spec(self, host: nn.Module, spec: Any) -> Any:
        """The request as ``layers/width`` takes it: the stages it names (indices among
        all the host's pairs), or every inner pair when it names none."""
        return attrs.evolve(spec, stages=tuple(spec.stages) or inner_pairs(host))

    def problems(self, host: nn.Module, spec: Any) -> list[str]:
        inner = inner_pairs(host)
        outside = [i for i in spec.stages if i not in inner]
        if outside:
            names = host.stage_names() if isinstance(host, WidensItsLayers) else ()
            return [
                f"widen_stages {outside}: {self.name} widens pairs inside a submodule only; "
                f"those are {', '.join(f'{i} ({names[i]})' for i in inner) or 'none'}"
            ]
        return self._narrowed().problems(host, self._spec(host, spec))

    def start(
        self,
        model: GrowingModel,
        spec: Any,
        *,
        generator: torch.Generator,
        born_epoch: int,
        replayed: Any = None,
    ) -> HostGrowth:
        # A checkpoint's record holds the exact plan (its pairs and widths): replay it.
        asked = spec if replayed is not None else self._spec(model.host, spec)
        return self._narrowed().start(
            model, asked, generator=generator, born_epoch=born_epoch, replayed=replayed
        )

    def sample(self) -> OperatorSample:
        import torch

        from esper_core import host_from_module, widenable_layers
        from esper_example_operator.sample import Tabular

        torch.manual_seed(0)
        model = Tabular()
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
        host = host_from_module(model, ["mlp.1"], x)
        report = widenable_layers(model, x)
        host.enable_width(report.pairs, report.refused)
        return OperatorSample(host, x, WidthGrowthSpec(at=0.0))


OPERATORS = (InnerWidth(),)


@hookimpl
def esper_register_operators(register: Register) -> None:
    for operator in OPERATORS:
        register(operator)
