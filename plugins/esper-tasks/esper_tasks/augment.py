"""Batched image augmentation on device, driven only by the generator it is given."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _randint(high: int, n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    # Drawn where the generator lives, then moved: the same generator state gives the
    # same augmentation whichever device holds the batch.
    draw = torch.randint(0, high, (n,), generator=generator, device=generator.device)
    return draw.to(device, non_blocking=True)


def random_crop_flip(x: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """Random ``H x W`` crops of ``x`` zero-padded by ``padding``, each flipped with p = 1/2.

    ``x`` is ``[B, C, H, W]``; every sample gets its own offset and flip, applied with two
    ``gather`` calls over the whole batch (the flip is folded into the column index).
    """
    b, c, h, w = x.shape
    oy = _randint(2 * padding + 1, b, generator, x.device)
    ox = _randint(2 * padding + 1, b, generator, x.device)
    flip = _randint(2, b, generator, x.device).bool()
    padded = F.pad(x, (padding, padding, padding, padding))
    rows = oy[:, None] + torch.arange(h, device=x.device)
    cols_fwd = torch.arange(w, device=x.device)
    cols = ox[:, None] + torch.where(flip[:, None], w - 1 - cols_fwd, cols_fwd)
    out = torch.gather(padded, 2, rows[:, None, :, None].expand(b, c, h, w + 2 * padding))
    return torch.gather(out, 3, cols[:, None, None, :].expand(b, c, h, w))
