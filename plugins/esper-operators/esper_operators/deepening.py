"""What a host depth growth does to a transformer's stack: the new blocks it puts on top,
each behind a mask, and how they fold in or come out again.

A new block ``b`` runs as ``torch.lerp(x, b(x), m)``: at ``m = 0`` that is ``x`` itself,
bit for bit (``x + 0 x (b(x) - x)``), whatever ``b``'s weights, so the stack computes what
it did; at ``m = 1`` it is ``b(x)`` exactly (lerp's end points are exact), so the fold
(the gate taken away, the plain block left in the stack) changes no bit either. As ``b``
is a residual block, ``b(x) = x + f(x)``, the ramp scales the block's residual branch:
``x + m f(x)``. The new blocks are the stack's own copies, in order (``stack``: G_stack,
Du et al. 2024, blocks ``[b1, b2] -> [b1, b2, b1', b2']``), or fresh blocks initialised
as the host initialises its own (``identity``).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from esper_core.components.host import DeepenableTransformer, InjectionSpec
from esper_core.lifecycle.width_fold import FoldedParam

DEPTH_MODES = ("stack", "identity")


class GatedBlock(nn.Module):
    """A block born into the stack behind :attr:`mask` (see the module docstring)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.lerp(x, self.block(x), self.mask.to(x.dtype))


class StackDeepening:
    """``factor - 1`` more stacks of blocks on top of ``host``'s (the operation of a
    :class:`~esper_operators.host_depth.HostDepthGrowth`)."""

    def __init__(
        self,
        host: DeepenableTransformer,
        mode: str,
        factor: int,
        generator: torch.Generator | None,
    ) -> None:
        self.host = host
        self.old_depth = len(host.residual_blocks())
        self.new_depth = self.old_depth * factor
        old = host.residual_blocks()
        blocks: list[nn.Module] = []
        for _ in range(factor - 1):
            if mode == "stack":
                blocks += [copy.deepcopy(block) for block in old]
            else:
                gen = generator if generator is not None else torch.Generator()
                blocks += [host.new_block(gen, self.new_depth) for _ in old]
        self._gated = [GatedBlock(block) for block in blocks]
        self._at = len(host.top_stage())

    def install(self) -> None:
        top = self.host.top_stage()
        for gated in self._gated:
            top.append(gated)
        self.host.set_depth(self.new_depth)

    def set_mask(self, value: float) -> None:
        for gated in self._gated:
            gated.mask.fill_(value)

    def new_parameters(self) -> list[nn.Parameter]:
        return [p for gated in self._gated for p in gated.block.parameters()]

    def fold(self) -> list[FoldedParam]:
        # The plain blocks keep their parameters (the very same tensors): the optimizer's
        # state follows them as it is, nothing to assemble.
        top = self.host.top_stage()
        for i, gated in enumerate(self._gated):
            top[self._at + i] = gated.block
        self._gated = []
        return []

    def restore(self) -> None:
        top = self.host.top_stage()
        del top[self._at :]
        self.host.set_depth(self.old_depth)
        self._gated = []

    def touches(self, spec: InjectionSpec) -> bool:
        # The slot on top of the stack: a seed born there while the new blocks are gated
        # would copy a gated block (lifecycle.stack_blocks).
        return spec.segment == self.host.num_segments() - 1
