"""What keeps a seed's numbers out of the host (DOMAIN §2, isolation).

* :func:`straight_through`: the TRAINING forward. Its value is the host activation,
  bit for bit, and the task gradient reaches both the host and the seed output; no
  arithmetic touches the seed output, so an ``inf`` there cannot turn the host's output
  or gradients into NaN (``h + (s - s.detach())`` does: ``inf - inf``).
* :func:`finite_or_host`: a blended seed's non-finite output elements are replaced by
  the host activation, so a diverging seed degrades to "seed off" where it diverged
  instead of poisoning the host; the slot counts such forwards and the env prunes the
  seed at the end of the epoch.
"""

from __future__ import annotations

from typing import Any

import torch


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, host: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
        if seed.shape != host.shape:
            raise ValueError(
                f"the seed's output has shape {tuple(seed.shape)}, the host activation "
                f"{tuple(host.shape)}; a seed must keep the shape of its input"
            )
        ctx.seed_dtype = seed.dtype
        return host.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad.to(ctx.seed_dtype)


def straight_through(host: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
    """``host`` in the forward pass; the gradient of the result goes to both inputs."""
    out: torch.Tensor = _StraightThrough.apply(host, seed)
    return out


def any_nonfinite(seed: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor: whether ``seed`` holds an inf or a NaN (no host sync).

    Summed in float32: inf and NaN survive a sum, and a finite fp16 activation cannot
    overflow a float32 total.
    """
    return ~torch.isfinite(seed.detach().sum(dtype=torch.float32))


def finite_or_host(seed: torch.Tensor, host: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``seed`` with each non-finite element replaced by ``host``'s, and whether there was one."""
    finite = torch.isfinite(seed)
    return torch.where(finite, seed, host), ~finite.all()
