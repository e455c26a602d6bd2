"""The depth operators: a transformer's stack of residual blocks (``transformer/depth``)
and the conv layers of a CNN's stages before their pools (``cnn/depth``). Each grows the
host a ``DepthGrowthSpec`` asks for: ``factor`` times as deep, its new blocks or layers
copies (``stack``: G_stack) or fresh ones (``identity``), each behind a mask."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from esper_core.components.growth_operator import GrowthSite, OperatorSample
from esper_core.components.growth_request import DepthGrowthSpec
from esper_core.components.host import DeepenableCNN, DeepenableTransformer, InjectionSpec
from esper_core.config_limits import MAX_HOST_WEIGHTS
from esper_core.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    import torch
    from torch import nn

    from esper_core.lifecycle.host_growth import GrowingModel, HostGrowth
    from esper_operators.depth_layouts import DepthLayout

# Torch and the masked modules load when a host grows, not when `esper plugins` lists.


def depth_problems(
    host: nn.Module, spec: DepthGrowthSpec, layout: DepthLayout | None = None
) -> list[str]:
    """A depth request's problems: the mode, the factor, the stages, and the weights."""
    from esper_core.lifecycle.host_growth import GrowthError
    from esper_operators.host_depth import check_plan

    problems = []
    try:
        check_plan(host, spec.mode, spec.factor, spec.stages, layout)
    except GrowthError as exc:
        problems.append(str(exc))
    # At most factor x the host's weights (each stage or the stack grows that much).
    weights = spec.factor * sum(p.numel() for p in host.parameters())
    if weights > MAX_HOST_WEIGHTS:
        problems.append(
            f"the deepened host would hold up to {weights:,} weights (factor "
            f"{spec.factor}); at most {MAX_HOST_WEIGHTS:,}: lower the factor"
        )
    return problems


class _Depth(ABC):
    """What the depth operators share: the request's checks and the growth they start."""

    name = ""
    kind = "depth"
    description = ""
    needs = ""

    @abstractmethod
    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        """The depths of ``host`` this operator grows; empty: not a host of its kind."""

    @abstractmethod
    def sample(self) -> OperatorSample:
        """A small host of its kind."""

    @property
    @abstractmethod
    def layout(self) -> DepthLayout:
        """How its hosts deepen (the checks, the gated modules, the depths' names)."""

    def refusal(self, host: nn.Module) -> str | None:
        return None

    # New blocks or layers keep the activations' shape: a fossil's modules still fit.
    keeps_fossils = True

    def problems(self, host: nn.Module, spec: Any) -> list[str]:
        return depth_problems(host, spec, self.layout)

    def touches_slot(self, host: nn.Module, spec: Any, slot: InjectionSpec) -> bool:
        """Whether deepening ``host`` as ``spec`` asks changes what a seed at ``slot`` sees."""
        return self.layout.touches(host, spec.stages, slot)

    def start(
        self,
        model: GrowingModel,
        spec: Any,
        *,
        generator: torch.Generator,
        born_epoch: int,
        replayed: Any = None,
    ) -> HostGrowth:
        from esper_operators.host_depth import HostDepthGrowth

        # A record's plan is its request's (mode, factor, stages as asked).
        return HostDepthGrowth(
            model,
            spec.mode,
            spec.factor,
            stages=spec.stages,
            tempo=spec.tempo,
            curve=spec.curve,
            generator=generator,
            born_epoch=born_epoch,
            layout=self.layout,
        )


class TransformerDepth(_Depth):
    name = "transformer/depth"
    description = "A transformer's stack of blocks, factor times as deep (G_stack or fresh blocks)."
    needs = (
        "a transformer host of residual blocks (esper_core.components.host."
        "DeepenableTransformer, such as the tasks' TransformerHost)"
    )

    @property
    def layout(self) -> DepthLayout:
        from esper_operators.depth_layouts import STACK

        return STACK

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        if not isinstance(host, DeepenableTransformer):
            return ()
        return (GrowthSite("n_layer", len(host.residual_blocks())),)

    def sample(self) -> OperatorSample:
        import torch
        from esper_tasks.hosts.transformer import TransformerHost

        torch.manual_seed(0)
        x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(1))
        return OperatorSample(TransformerHost(11, 8, 16, 2, 2, 2), x, DepthGrowthSpec(at=0.0))


class CNNDepth(_Depth):
    name = "cnn/depth"
    description = "The conv layers of a CNN's stages before their pools, factor times as many."
    needs = "a CNN host of conv stages (DeepenableCNN, such as the tasks' CNNHost)"

    @property
    def layout(self) -> DepthLayout:
        from esper_operators.depth_layouts import STAGES

        return STAGES

    def sites(self, host: nn.Module) -> tuple[GrowthSite, ...]:
        if not isinstance(host, DeepenableCNN) or isinstance(host, DeepenableTransformer):
            return ()
        from esper_core.lifecycle.host_growth import GrowthError
        from esper_operators.deepening_cnn import stage_depths

        try:
            depths = stage_depths(host)
        except GrowthError:  # a stage that is not conv layers: the request's check says so
            depths = tuple(0 for _ in host.depth_stages())
        return tuple(GrowthSite(f"stage{i}_layers", d) for i, d in enumerate(depths))

    def sample(self) -> OperatorSample:
        import torch
        from esper_tasks.hosts.cnn import CNNHost

        torch.manual_seed(0)
        x = torch.randn(4, 1, 16, 16, generator=torch.Generator().manual_seed(1))
        return OperatorSample(CNNHost(1, 10, 4, 2, 2), x, DepthGrowthSpec(at=0.0))


OPERATORS = (TransformerDepth(), CNNDepth())


@hookimpl
def esper_register_operators(register: Register) -> None:
    for operator in OPERATORS:
        register(operator)
