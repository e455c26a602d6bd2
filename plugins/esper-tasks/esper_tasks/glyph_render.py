"""Procedurally generated glyph images: ten stroke templates under random distortion.

In the spirit of MNIST-1D (Greydanus, "Scaling down deep learning", 2020): a small,
fully synthetic data set whose difficulty comes from the generative process, not
from its size, so that models of different capacity separate where MNIST-like data
cannot. This is a 2-D variant written for Esper's CNN hosts: each class is a glyph
made of straight strokes on a seven-segment-like frame plus diagonals, so classes
differ only in which strokes are present and where (telling 8 from 0, 6 and 9 needs
the whole layout, i.e. receptive field and capacity). Every sample draws a random
affine distortion (scale, shear, rotation, translation), a stroke width and
intensity, a smooth correlated background and white noise. Generation is vectorised
numpy and deterministic in the generator it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import numpy as np

# Frame points in a unit box centred on 0: a seven-segment layout plus its centre.
_P = {
    "tl": (-0.5, -1.0),
    "tr": (0.5, -1.0),
    "ml": (-0.5, 0.0),
    "mr": (0.5, 0.0),
    "bl": (-0.5, 1.0),
    "br": (0.5, 1.0),
    "tc": (0.0, -1.0),
    "bc": (0.0, 1.0),
}
# Strokes per class, as pairs of frame points: digit-like shapes, several of which
# differ by a single stroke (0/8, 6/8, 9/8, 3/9, 5/6), which is what makes the task hard.
_GLYPHS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("tl", "tr"), ("tr", "br"), ("br", "bl"), ("bl", "tl")),  # 0
    (("tc", "bc"), ("tc", "ml")),  # 1
    (("tl", "tr"), ("tr", "mr"), ("mr", "ml"), ("ml", "bl"), ("bl", "br")),  # 2
    (("tl", "tr"), ("tr", "br"), ("br", "bl"), ("ml", "mr")),  # 3
    (("tl", "ml"), ("ml", "mr"), ("tr", "br")),  # 4
    (("tr", "tl"), ("tl", "ml"), ("ml", "mr"), ("mr", "br"), ("br", "bl")),  # 5
    (("tr", "tl"), ("tl", "bl"), ("bl", "br"), ("br", "mr"), ("mr", "ml")),  # 6
    (("tl", "tr"), ("tr", "bc")),  # 7
    (("tl", "tr"), ("tr", "br"), ("br", "bl"), ("bl", "tl"), ("ml", "mr")),  # 8
    (("mr", "ml"), ("ml", "tl"), ("tl", "tr"), ("tr", "br"), ("br", "bl")),  # 9
)
NUM_CLASSES = len(_GLYPHS)


@frozen
class GlyphStyle:
    """How strongly each sample is distorted; every field is a task option."""

    image_size: int = 16
    max_shift: float = 0.15  # translation, as a fraction of the image side
    scale_range: float = 0.25  # glyph scale in [1 - r, 1 + r] around 0.3 of the side
    max_shear: float = 0.4
    max_rotation: float = 0.35  # radians
    stroke_width: tuple[float, float] = (0.6, 1.3)  # pixels (Gaussian profile)
    background: float = 0.3  # amplitude of the smooth correlated background
    background_sigma: float = 2.0  # its correlation length, in pixels
    noise: float = 0.15  # iid Gaussian noise


def _segments() -> tuple[np.ndarray, np.ndarray]:
    """All glyphs' strokes padded to one length: ends ``[10, S, 2, 2]`` and a mask ``[10, S]``."""
    import numpy as np

    most = max(len(g) for g in _GLYPHS)
    ends = np.zeros((NUM_CLASSES, most, 2, 2), dtype=np.float32)
    mask = np.zeros((NUM_CLASSES, most), dtype=bool)
    for c, glyph in enumerate(_GLYPHS):
        for s, (a, b) in enumerate(glyph):
            ends[c, s] = (_P[a], _P[b])
            mask[c, s] = True
    return ends, mask


def _affine(n: int, style: GlyphStyle, rng: np.random.Generator) -> np.ndarray:
    """Per-sample 2x2 linear maps (scale, shear, rotation) in pixels, ``[n, 2, 2]``."""
    import numpy as np

    size = style.image_size
    scale = 0.3 * size * (1 + style.scale_range * rng.uniform(-1, 1, n))
    shear = style.max_shear * rng.uniform(-1, 1, n)
    theta = style.max_rotation * rng.uniform(-1, 1, n)
    cos, sin = np.cos(theta), np.sin(theta)
    rot = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)
    sh = np.zeros((n, 2, 2))
    sh[:, 0, 0] = sh[:, 1, 1] = 1.0
    sh[:, 0, 1] = shear
    return scale[:, None, None] * (rot @ sh)


def render(labels: np.ndarray, style: GlyphStyle, rng: np.random.Generator) -> np.ndarray:
    """Images ``[n, size, size]`` (float32, roughly zero mean, unit scale) for ``labels``."""
    import numpy as np
    from scipy.ndimage import gaussian_filter

    n, size = len(labels), style.image_size
    ends, mask = _segments()
    lin = _affine(n, style, rng)
    centre = (size - 1) / 2 + style.max_shift * size * rng.uniform(-1, 1, (n, 2))
    width = rng.uniform(*style.stroke_width, n)
    ink = rng.uniform(0.7, 1.3, n)

    # Stroke ends in pixels: [n, S, 2 ends, xy].
    pts = np.einsum("nij,nsej->nsei", lin.astype(np.float32), ends[labels])
    pts += centre[:, None, None, :].astype(np.float32)
    a, b = pts[:, :, 0, :], pts[:, :, 1, :]
    grid = np.stack(np.meshgrid(np.arange(size), np.arange(size), indexing="xy"), -1)
    grid = grid.reshape(-1, 2).astype(np.float32)  # [P, xy], row-major pixels
    # Distance from every pixel to every stroke (the segment, not the infinite line).
    ab = b - a  # [n, S, 2]
    ap = grid[None, None, :, :] - a[:, :, None, :]  # [n, S, P, 2]
    denom = np.maximum((ab * ab).sum(-1), 1e-9)[:, :, None]
    t = np.clip((ap * ab[:, :, None, :]).sum(-1) / denom, 0.0, 1.0)
    d2 = ((ap - t[..., None] * ab[:, :, None, :]) ** 2).sum(-1)  # [n, S, P]
    strokes = np.exp(-d2 / (2 * width[:, None, None] ** 2)) * mask[labels][:, :, None]
    img = ink[:, None] * strokes.max(axis=1)  # [n, P]
    img = img.reshape(n, size, size)

    smooth = gaussian_filter(
        rng.standard_normal((n, size, size)), (0, *(2 * [style.background_sigma]))
    )
    smooth /= smooth.reshape(n, -1).std(axis=1).reshape(n, 1, 1) + 1e-9
    img = img + style.background * smooth + style.noise * rng.standard_normal((n, size, size))
    return img.astype(np.float32)


def generate(
    n: int, style: GlyphStyle, rng: np.random.Generator, chunk: int = 2000
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images with balanced, shuffled labels: ``([n, 1, size, size] float32, [n] int64)``."""
    import numpy as np

    labels = rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.int64)
    # Chunks bound the [n, S, P, 2] distance arrays (about 30 MB per 2,000 images).
    images = [render(labels[i : i + chunk], style, rng) for i in range(0, n, chunk)]
    return np.concatenate(images)[:, None], labels
