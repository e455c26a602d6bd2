"""tasks.glyphs: generated deterministically from split_seed, sizes, options, hosts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from esper_tasks.glyph_render import NUM_CLASSES, GlyphStyle, generate
from esper_tasks.glyphs import PRESETS, GlyphsOptions, GlyphsTask

from esper_core.components.task import Task
from esper_core.converter import structure
from esper_core.errors import ConfigError

SMALL = {"n_train": 200, "n_val": 100, "n_test": 100}


def _task(**options: object) -> GlyphsTask:
    return GlyphsTask(structure({**SMALL, **options}, GlyphsOptions))


def test_default_sizes_resolve_a_few_tenths_of_a_point() -> None:
    options = GlyphsOptions()
    assert (options.n_train, options.n_val, options.n_test) == (10_000, 5_000, 5_000)
    assert 100 / options.n_test <= 0.02  # one test image, in points


def test_splits_have_the_declared_shapes_balanced_labels_and_finite_values() -> None:
    data = _task().load_data("cpu")
    for split, n in ((data.train, 200), (data.val, 100), (data.test, 100)):
        images, labels = split.inputs, split.targets
        assert images.shape == (n, 1, 16, 16) and images.dtype == torch.float32
        assert labels.dtype == torch.int64
        assert torch.isfinite(images).all()
        counts = torch.bincount(labels, minlength=NUM_CLASSES)
        assert int(counts.max() - counts.min()) <= 1


def test_generation_depends_on_split_seed_only() -> None:
    a, b = _task().split_arrays("test"), _task().split_arrays("test")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    other = _task(split_seed=1).split_arrays("test")
    assert not np.array_equal(a[0], other[0])
    # Each split has its own stream: more training images leave the test images alone.
    bigger = _task(n_train=300).split_arrays("test")
    assert np.array_equal(a[0], bigger[0])


def test_splits_do_not_share_images() -> None:
    # Every pair, validation against test included: with one stream for both, a recipe
    # tuned on validation would be reported on the very same images (mutation
    # "glyphs-val-test-same-stream" in tests/mutations.py).
    data = _task().load_data("cpu")
    splits = {"train": data.train, "val": data.val, "test": data.test}
    seen = {name: {bytes(x.numpy().tobytes()) for x in s.inputs} for name, s in splits.items()}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not seen[a] & seen[b], (a, b)


def test_classes_differ_without_noise_and_noise_is_what_makes_it_hard() -> None:
    rng = np.random.default_rng(0)
    clean = GlyphStyle(background=0.0, noise=0.0, max_shift=0, max_shear=0, max_rotation=0)
    images, labels = generate(NUM_CLASSES * 4, clean, rng)
    means = np.stack([images[labels == c].mean(axis=0).ravel() for c in range(NUM_CLASSES)])
    # Every pair of classes has a different mean glyph (no two templates coincide).
    gaps = np.linalg.norm(means[:, None] - means[None], axis=-1)
    assert (gaps + np.eye(NUM_CLASSES) * 1e9).min() > 0.5
    noisy, _ = generate(NUM_CLASSES * 4, GlyphStyle(), np.random.default_rng(0))
    assert noisy.std() > images.std()


def test_protocol_and_defaults() -> None:
    task = _task()
    assert isinstance(task, Task)
    assert task.topology == "cnn" and task.num_classes == 10
    assert task.chance_loss == pytest.approx(math.log(10))


@pytest.mark.parametrize(
    ("preset", "channels"),
    [("tiny", (2, 4, 8)), ("small", (4, 8, 16)), ("base", (8, 16, 32)), ("large", (16, 32, 64))],
)
def test_presets_build_hosts(preset: str, channels: tuple[int, ...]) -> None:
    host = _task(preset=preset).build_host()
    assert tuple(spec.channels for spec in host.injection_specs()) == channels
    assert host(torch.zeros(2, 1, 16, 16)).shape == (2, 10)


def test_presets_grow_in_size() -> None:
    sizes = [
        sum(p.numel() for p in _task(preset=name).build_host().parameters()) for name in PRESETS
    ]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"tasks\.glyphs\.preset"):
        structure({"preset": "huge"}, GlyphsOptions, "tasks.glyphs")
    with pytest.raises(ConfigError, match="image_size 8 is too small for 4 blocks"):
        GlyphsTask(GlyphsOptions(image_size=8, n_blocks=4))
    assert _task(base_channels=6).preset.base_channels == 6
