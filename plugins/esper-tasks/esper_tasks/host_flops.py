"""Training FLOPs per sample of the task hosts, from their shapes alone (no torch).

For the estimate of ``esper compare --dry-run``, which builds no model. Each count is what
torch's ``FlopCounterMode`` reports for a training step of the bare host (the figure a run
summary's ``train_flops`` is made of), and a test holds every preset to it: convolutions
and matrix products only (norms, activations, pools and embeddings lookups count zero,
and so does causal attention on the CPU, whose kernel the counter does not price); a
backward pass costs twice the forward (gradients of the inputs and of the weights),
except the first layer's, whose input needs no gradient.

The hosts' slots (where each sits, on how many positions) and a grown host's preset
price growth in the same estimate.
"""

from __future__ import annotations

import attrs

from esper_core.components.host import InjectionSpec, slot_id
from esper_core.components.task import SlotSite
from esper_tasks.presets import CNNPreset, TransformerPreset


def _conv(c_in: int, c_out: int, side: int) -> int:
    """Forward FLOPs of a 3x3 same-padding convolution on one ``side`` x ``side`` image."""
    return 2 * 9 * c_in * c_out * side * side


def cnn_train_flops(in_channels: int, num_classes: int, preset: CNNPreset, side: int) -> int:
    """One sample's training FLOPs of a :class:`~esper_tasks.hosts.cnn.CNNHost`."""
    forward, first, c_in = 0, 0, in_channels
    for i in range(preset.n_blocks):
        c = preset.base_channels * 2**i
        for j in range(preset.convs_per_block):
            flops = _conv(c_in, c, side)
            if i == j == 0:
                first = flops
            forward += flops
            c_in = c
        side //= 2
        forward += preset.convs_after_pool * _conv(c, c, side)
    forward += 2 * c_in * num_classes  # the head
    return 3 * forward - first


def transformer_train_flops(vocab: int, block_size: int, preset: TransformerPreset) -> int:
    """One sequence's training FLOPs of a
    :class:`~esper_tasks.hosts.transformer.TransformerHost` (``block_size`` tokens)."""
    d = preset.d_model
    # Per token and block: q, k, v and the output projection (4 d^2), the MLP (8 d^2).
    per_token = preset.n_layer * 2 * 12 * d * d + 2 * d * vocab  # and the tied head
    # Per block, attention's two batched matmuls over every pair of positions (counted
    # through the math kernel, causal mask and all: esper_core.env.cost).
    attention = preset.n_layer * 2 * 2 * block_size * block_size * d
    return 3 * (per_token * block_size + attention)


def cnn_slot_sites(preset: CNNPreset, side: int) -> tuple[SlotSite, ...]:
    """The slots of a :class:`~esper_tasks.hosts.cnn.CNNHost`, as it declares them: one
    after each block's pool (before it with ``slots_before_pool``), on its pixels."""
    channels = [preset.base_channels * 2**i for i in range(preset.n_blocks)]
    sites = []
    for i, c in enumerate(channels):
        at = side // 2**i if preset.slots_before_pool else side // 2 ** (i + 1)
        nxt = channels[i + 1] if i + 1 < len(channels) else None
        spec = InjectionSpec(slot_id(0, i), c, "cnn", i, nxt, 2 if nxt is not None else 1)
        sites.append(SlotSite(spec, at * at))
    return tuple(sites)


def grown_cnn(preset: CNNPreset, width: float, depth: int) -> CNNPreset:
    """The preset of a CNN host whose stages all grew ``width`` times as wide and ``depth``
    times as deep before their pools (what the width and depth operators build)."""
    return attrs.evolve(
        preset,
        base_channels=max(1, round(preset.base_channels * width)),
        convs_per_block=preset.convs_per_block * depth,
    )


def transformer_slot_sites(preset: TransformerPreset, block_size: int) -> tuple[SlotSite, ...]:
    """The slots of a :class:`~esper_tasks.hosts.transformer.TransformerHost`: one after
    each segment, on every token of the sequence."""
    return tuple(
        SlotSite(InjectionSpec(slot_id(0, i), preset.d_model, "transformer", i), block_size)
        for i in range(preset.n_segments)
    )


def grown_transformer(preset: TransformerPreset, width: float, depth: int) -> TransformerPreset:
    """The preset of a transformer host grown ``width`` times as wide (``d_model``) and
    ``depth`` times as deep (its stack of blocks)."""
    return attrs.evolve(
        preset, d_model=max(1, round(preset.d_model * width)), n_layer=preset.n_layer * depth
    )
