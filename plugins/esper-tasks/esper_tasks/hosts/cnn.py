"""The CNN host: conv3x3+BN+ReLU blocks with doubling widths, a slot after each block."""

from __future__ import annotations

import math

import torch
from torch import nn

from esper_core.components.host import InjectionSpec, slot_id


def conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    """One host layer, with torch's default initialisation (the ``conv_layer`` seed
    builds the same layer, so a seed-grown host and its static twin start alike)."""
    # No conv bias: the BatchNorm shift that follows makes it redundant.
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


def _is_pool(module: nn.Module) -> bool:
    return isinstance(module, (nn.MaxPool2d, nn.AvgPool2d))


def _block(c_in: int, c_out: int, convs: int, after_pool: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(convs):
        layers += conv_bn_relu(c_in, c_out)
        c_in = c_out
    layers.append(nn.MaxPool2d(2))
    for _ in range(after_pool):
        layers += conv_bn_relu(c_out, c_out)
    return nn.Sequential(*layers)


class CNNHost(nn.Module):
    """``n_blocks`` blocks of ``convs_per_block`` conv3x3+BN+ReLU, each followed by a 2x
    max-pool and ``convs_after_pool`` more conv3x3+BN+ReLU layers at the pooled size (the
    static twin of a host grown by ``conv_layer`` seeds, which sit after the pool).

    Block ``i`` has ``base_channels * 2**i`` channels and is segment ``i``; slot
    ``r0c{i}`` sits after it and names block ``i + 1`` (if any) as the segment that
    follows it, for branch seeds. The head is a global average pool and a linear layer.
    With ``slots_before_pool`` each slot sits before its block's pool instead, at the
    block's full resolution: the pool (and any ``convs_after_pool``) then opens the next
    segment, or the head after the last block. The network and its parameter names are
    the same either way; only where seeds grow changes (a ``conv_layer`` seed there
    grows ``convs_per_block`` by one).
    Inputs are ``[B, in_channels, H, W]`` with ``H, W >= 2**n_blocks``.
    """

    topology = "cnn"

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        base_channels: int,
        n_blocks: int,
        convs_per_block: int = 1,
        convs_after_pool: int = 0,
        slots_before_pool: bool = False,
    ) -> None:
        super().__init__()
        if min(in_channels, num_classes, base_channels, n_blocks, convs_per_block) < 1:
            raise ValueError("CNNHost sizes must all be at least 1")
        if convs_after_pool < 0:
            raise ValueError("CNNHost convs_after_pool must be at least 0")
        self.channels = tuple(base_channels * 2**i for i in range(n_blocks))
        c_in = in_channels
        blocks = []
        for c in self.channels:
            blocks.append(_block(c_in, c, convs_per_block, convs_after_pool))
            c_in = c
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(self.channels[-1], num_classes)
        # With the slot before the pool, a block splits at its pool into the part before
        # its slot and the part after it (the pool and any convs after it).
        self._before_pool = slots_before_pool
        self._specs = self._injection_specs()

    def _injection_specs(self) -> tuple[InjectionSpec, ...]:
        # Every slot but the last is followed by the next block: its width, then a 2x pool.
        following = (*self.channels[1:], None)
        return tuple(
            InjectionSpec(
                slot_id=slot_id(0, i),
                channels=c,
                topology=self.topology,
                segment=i,
                next_channels=nxt,
                next_stride=2 if nxt is not None else 1,
            )
            for i, (c, nxt) in enumerate(zip(self.channels, following))
        )

    # ------------------------------------------------------------ width growth

    def conv_stages(self) -> nn.ModuleList:
        """The blocks, for host width growth (``esper_core.components.host.WidenableHost``)."""
        if self._before_pool:
            from esper_core.lifecycle.host_growth import WidthError

            # A widened block is one masked module: it cannot be cut at its pool.
            raise WidthError(
                "a CNN host with slots_before_pool cannot grow in width; set "
                "slots_before_pool = false to widen it"
            )
        return self.blocks

    def stage_channels(self) -> tuple[int, ...]:
        return self.channels

    def set_stage_channels(self, channels: tuple[int, ...]) -> None:
        """The blocks' widths after a width growth replaced them; the slots follow."""
        if len(channels) != len(self.blocks):
            raise ValueError(f"{len(self.blocks)} blocks, {len(channels)} widths given")
        self.channels = tuple(channels)
        self._specs = self._injection_specs()

    # ------------------------------------------------------------ depth growth

    def depth_stages(self) -> nn.ModuleList:
        """The blocks, for host depth growth (``esper_core.components.host.DeepenableCNN``):
        a new layer goes before a block's pool, so its slot stays where it is."""
        return self.blocks

    def new_layer(self, channels: int, generator: torch.Generator) -> nn.Sequential:
        """A ``channels -> channels`` conv3x3+BN+ReLU, torch's default init drawn from
        ``generator`` (the host's own layers have that init, from the global stream)."""
        with torch.random.fork_rng(devices=[]):  # torch's own init draws: leave no trace
            layer = nn.Sequential(*conv_bn_relu(channels, channels))
        conv = layer[0]
        assert isinstance(conv, nn.Conv2d)
        with torch.no_grad():
            nn.init.kaiming_uniform_(conv.weight, a=math.sqrt(5), generator=generator)
        weight = self.head.weight
        return layer.to(device=weight.device, dtype=weight.dtype)

    def num_segments(self) -> int:
        return len(self.blocks)

    def injection_specs(self) -> tuple[InjectionSpec, ...]:
        return self._specs

    def _layers(self, index: int, before_slot: bool) -> list[nn.Module]:
        block = list(self.blocks[index])
        # At the pool: a depth growth may have put more layers before it.
        split = next(i for i, m in enumerate(block) if _is_pool(m))
        return block[:split] if before_slot else block[split:]

    def forward_segment(self, index: int, x: torch.Tensor) -> torch.Tensor:
        if not self._before_pool:
            return self.blocks[index](x)
        layers = self._layers(index - 1, False) if index > 0 else []
        for layer in (*layers, *self._layers(index, True)):
            x = layer(x)
        return x

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        if self._before_pool:
            for layer in self._layers(len(self.blocks) - 1, False):
                x = layer(x)
        return self.head(x.mean(dim=(2, 3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.num_segments()):
            x = self.forward_segment(i, x)
        return self.forward_head(x)
