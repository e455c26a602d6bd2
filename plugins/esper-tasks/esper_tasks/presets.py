"""The hosts' presets (CNNPreset, TransformerPreset), the option overrides a task may put
over its preset, and the bounds that keep a CNN host small enough to build.

Below common.py and host_flops.py, which both read a preset: neither imports the other
for it. Nothing here imports torch (plugin discovery imports this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrs import frozen

from esper_core.config_limits import MAX_HOST_WEIGHTS
from esper_core.converter import in_range, options_field


@frozen
class CNNPreset:
    """Shape of a :class:`esper_tasks.hosts.cnn.CNNHost`."""

    base_channels: int
    n_blocks: int
    convs_per_block: int = 1
    convs_after_pool: int = 0
    slots_before_pool: bool = False


# The CNNHost fields a task's options may override over its preset.
CNN_HOST_FIELDS = (
    "base_channels",
    "n_blocks",
    "convs_per_block",
    "convs_after_pool",
    "slots_before_pool",
)


# Bounds of the CNN host options every image task shares (glyphs, digits, cifar10), far
# beyond any host worth growing and low enough that none takes minutes to build:
# measured on a loaded 2-core machine, a CNNHost of 12.5M weights (convs_per_block = 64)
# took 11 s to build, one of 99M (base_channels = 512, 4 blocks) 39 s, one of 200M
# (convs_per_block = 1024) 255 s.
MAX_BASE_CHANNELS = 1024
MAX_CONVS = 64


def base_channels_option() -> Any:
    return options_field(
        None,
        in_range(1, MAX_BASE_CHANNELS, integer=True),
        "Override the preset: channels of the first block (each block doubles them). At "
        "most 1024: wider hosts take minutes to build, and the host as a whole is held to "
        "100,000,000 weights.",
    )


def convs_per_block_option() -> Any:
    return options_field(
        None,
        in_range(1, MAX_CONVS, integer=True),
        "Override the preset: conv+BN+ReLU layers per block. At most 64: every layer is "
        "built and runs in every batch (1,024 per block took 4 minutes to build).",
    )


def convs_after_pool_option() -> Any:
    return options_field(
        None,
        in_range(0, MAX_CONVS, integer=True),
        "Override the preset: conv+BN+ReLU layers after each block's pool (where a "
        "conv_layer seed grows). At most 64, as convs_per_block.",
    )


def slots_before_pool_option() -> Any:
    return options_field(
        None,
        doc="Override the preset: put each slot before its block's pool (at the block's "
        "full resolution), so a conv_layer seed deepens the block itself.",
    )


def cnn_host_weights(in_channels: int, preset: CNNPreset) -> int:
    """The conv weights of a :class:`~esper_tasks.hosts.cnn.CNNHost`: the bulk of its
    parameters (biases, norms and the head are a vanishing share)."""
    weights, c_in = 0, in_channels
    for i in range(preset.n_blocks):
        c = preset.base_channels * 2**i
        later = preset.convs_per_block - 1 + preset.convs_after_pool
        weights += 9 * (c_in * c + later * c * c)
        c_in = c
    return weights


def cnn_host_problems(presets: dict[str, CNNPreset], options: Any, in_channels: int) -> list[str]:
    """The host the options describe is too large to build in reasonable time."""
    p: CNNPreset = resolve_preset(presets, options, CNN_HOST_FIELDS)
    weights = cnn_host_weights(in_channels, p)
    if weights <= MAX_HOST_WEIGHTS:
        return []
    return [
        f"the host would have {weights:,} conv weights (base_channels {p.base_channels}, "
        f"n_blocks {p.n_blocks}, convs_per_block {p.convs_per_block}, convs_after_pool "
        f"{p.convs_after_pool}); at most {MAX_HOST_WEIGHTS:,}, or it takes minutes to build: "
        "lower base_channels, n_blocks or the convs"
    ]


@frozen
class TransformerPreset:
    """Shape of a :class:`esper_tasks.hosts.transformer.TransformerHost`."""

    d_model: int
    n_layer: int
    n_head: int
    n_segments: int


def resolve_preset(presets: dict[str, Any], options: Any, fields: Sequence[str]) -> Any:
    """The preset named by ``options.preset`` with every non-None override of ``fields``."""
    import attrs

    preset = presets[options.preset]
    overrides = {f: getattr(options, f) for f in fields if getattr(options, f) is not None}
    return attrs.evolve(preset, **overrides)
