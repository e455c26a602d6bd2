"""What a host width growth does to the host's modules, one kind of host each: the masked
modules it installs, their masks, how they fold and how the originals come back.

:class:`~esper_operators.host_width.HostWidthGrowth` runs the lifecycle (the
ramp, the stages, the slots) and hands the modules to a :class:`Widening`:
:class:`ConvWidening` for a CNN's conv stages, and
:class:`~esper_operators.width_transformer.ResidualWidening` for a transformer's
residual width (each operator's layout, :mod:`esper_operators.width_layouts`, says which).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from esper_core.components.host import InjectionSpec, WidenableHost
from esper_core.lifecycle.host_growth import HostOperation, WidthError
from esper_core.lifecycle.module_swap import ModuleSwap
from esper_operators.width_conv import MaskedConvStage, MaskedLinearInput

# The host side of one width growth: the operation every host growth runs.
Widening = HostOperation


def conv_touches(widened: Sequence[int], segment: int) -> bool:
    """Whether widening a CNN's stages ``widened`` changes a slot after ``segment``: after
    a widened stage, or before one (a branch seed there produces the next stage's width)."""
    return segment in widened or segment + 1 in widened


class ConvWidening(ModuleSwap[int]):
    """A CNN's widened conv stages (:class:`MaskedConvStage`), and its head reading the
    last one's new channels (:class:`MaskedLinearInput`), keyed by stage index (-1: the
    head)."""

    def __init__(
        self,
        host: WidenableHost,
        old: tuple[int, ...],
        new: tuple[int, ...],
        generator: torch.Generator | None,
        cross_init: str,
    ) -> None:
        super().__init__()
        self.host = host
        self.old, self.new = old, new
        extra = [n - o for n, o in zip(new, old)]
        for i, base in enumerate(host.conv_stages()):
            in_extra = extra[i - 1] if i > 0 else 0
            if in_extra or extra[i]:
                if not isinstance(base, nn.Sequential):
                    raise WidthError(f"stage {i} is a {type(base).__name__}, not an nn.Sequential")
                self._masked[i] = MaskedConvStage(base, in_extra, extra[i], generator, cross_init)
        if extra[-1]:
            head = host.head
            if not isinstance(head, nn.Linear):
                raise WidthError(
                    f"the head is a {type(head).__name__}; width growth needs nn.Linear"
                )
            self._masked[-1] = MaskedLinearInput(head, extra[-1], generator, cross_init)

    def touches(self, spec: InjectionSpec) -> bool:
        widened = [i for i, (n, o) in enumerate(zip(self.new, self.old)) if n != o]
        return conv_touches(widened, spec.segment)

    def _put(self, index: int, module: nn.Module) -> nn.Module:
        """Put ``module`` in place of stage ``index`` (-1: the head); return what was there."""
        if index < 0:
            old = self.host.head
            self.host.head = module
            return old
        stages = self.host.conv_stages()
        old = cast(nn.Module, stages[index])
        stages[index] = module
        return old
