"""The image tasks' and charlm's options bound the work and the numbers
they set going, each in one line naming the option. Before, each value below was accepted:
a glyphs host of 1,024 convs per block took 4 minutes to build, noise of 1000 buried the
glyphs, and a 10-million-image glyph set at 64x64 asked for 153 GiB before any epoch."""

from __future__ import annotations

import attrs
import pytest
from esper_tasks.charlm import PRESETS as CHARLM_PRESETS
from esper_tasks.charlm import CharLMOptions
from esper_tasks.cifar10 import PRESETS as CIFAR_PRESETS
from esper_tasks.cifar10 import Cifar10Options
from esper_tasks.digits import PRESETS as DIGITS_PRESETS
from esper_tasks.digits import DigitsOptions
from esper_tasks.glyphs import PRESETS as GLYPHS_PRESETS
from esper_tasks.glyphs import GlyphsOptions
from esper_tasks.hosts.cnn import CNNHost
from esper_tasks.presets import cnn_host_weights
from torch import nn

from esper_core.config import load_config
from esper_core.converter import check_values
from esper_core.errors import ConfigError
from esper_core.run.resolve import resolve
from tests.plugin_set import plugin_manager

REFUSED = [
    ("tasks.glyphs.convs_per_block=1024", "tasks.glyphs.convs_per_block: expected an integer"),
    ("tasks.glyphs.convs_after_pool=1000", "tasks.glyphs.convs_after_pool: expected an integer"),
    ("tasks.glyphs.noise=1000", "tasks.glyphs.noise: expected a number in [0, 10]"),
    ("tasks.glyphs.background=1000", "tasks.glyphs.background: expected a number in [0, 10]"),
    ("tasks.glyphs.base_channels=65536", "tasks.glyphs.base_channels: expected an integer"),
    (
        ["tasks.glyphs.base_channels=1024", "tasks.glyphs.n_blocks=4"],
        "tasks.glyphs: the host would have 396,370,944 conv weights",
    ),
    (
        ["tasks.glyphs.n_train=10000000", "tasks.glyphs.image_size=64"],
        "tasks.glyphs: 10,010,000 images of 64x64 take 152.7 GiB of memory; at most 4 GiB",
    ),
    ("tasks.digits.convs_per_block=1024", "tasks.digits.convs_per_block: expected an integer"),
    (
        ["tasks.digits.base_channels=1024", "tasks.digits.convs_per_block=64"],
        "tasks.digits: the host would have",
    ),
    ("tasks.cifar10.convs_after_pool=100", "tasks.cifar10.convs_after_pool: expected an integer"),
    ("tasks.cifar10.val_size=50000", "tasks.cifar10.val_size: expected an integer in [1, 45000]"),
    ("tasks.charlm.block_size=65536", "tasks.charlm.block_size: expected an integer in [2, 2048]"),
    ("tasks.charlm.d_model=65536", "tasks.charlm.d_model: expected an integer in [1, 4096]"),
    ("tasks.charlm.n_layer=1024", "tasks.charlm.n_layer: expected an integer in [1, 128]"),
    ("tasks.charlm.n_head=4096", "tasks.charlm.n_head: expected an integer in [1, 256]"),
    ("tasks.charlm.max_chars=1000000000", "tasks.charlm.max_chars: expected an integer"),
    (
        ["tasks.charlm.d_model=4096", "tasks.charlm.n_layer=128", "tasks.charlm.n_segments=2"],
        "tasks.charlm: the host would have about 25,769,803,776 weights",
    ),
    ("tasks.dataset.image_size=65536", "tasks.dataset.image_size: expected an integer"),
]


@pytest.mark.parametrize(("assignments", "expected"), REFUSED, ids=lambda v: str(v)[:40])
def test_a_task_option_past_its_bound_is_one_line(
    assignments: str | list[str], expected: str
) -> None:
    sets = [assignments] if isinstance(assignments, str) else assignments
    task = sets[0].split(".")[1]
    config = load_config(overrides=[f"run.task={task}", *sets])
    with pytest.raises(ConfigError) as info:
        resolve(config, plugin_manager())
    message = str(info.value)
    assert expected in message and "\n" not in message, message


def test_the_bounds_say_why_in_the_options_help() -> None:
    for options in (GlyphsOptions, DigitsOptions, Cifar10Options, CharLMOptions):
        for name in ("convs_per_block", "noise", "block_size", "d_model", "val_size"):
            if hasattr(options(), name):
                doc = attrs.fields_dict(options)[name].metadata["doc"]
                assert "at most" in doc.lower() and "(" in doc, (options.__name__, name, doc)


@pytest.mark.parametrize(
    ("options", "presets"),
    [
        (GlyphsOptions, GLYPHS_PRESETS),
        (DigitsOptions, DIGITS_PRESETS),
        (Cifar10Options, CIFAR_PRESETS),
        (CharLMOptions, CHARLM_PRESETS),
    ],
    ids=["glyphs", "digits", "cifar10", "charlm"],
)
def test_every_preset_lies_inside_the_bounds(options: type, presets: dict[str, object]) -> None:
    for preset in presets:
        assert check_values(options(preset=preset), "tasks.x") == [], preset


def test_the_weight_count_is_the_hosts_conv_weights() -> None:
    preset = attrs.evolve(GLYPHS_PRESETS["small"], convs_per_block=2, convs_after_pool=1)
    host = CNNHost(1, 10, 4, 3, 2, 1)
    convs = sum(m.weight.numel() for m in host.modules() if isinstance(m, nn.Conv2d))
    assert cnn_host_weights(1, preset) == convs
