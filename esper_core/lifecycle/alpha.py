"""Alpha curves, per-epoch schedules and blend operators (DOMAIN §2)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from attrs import define, frozen
from torch import nn


def linear(t: float) -> float:
    return t


def cosine(t: float) -> float:
    return (1.0 - math.cos(math.pi * t)) / 2.0


def sigmoid(t: float, steepness: float = 10.0) -> float:
    """Logistic curve rescaled so that t=0 gives exactly 0 and t=1 exactly 1.

    Written with ``logistic(x) = (1 + tanh(x / 2)) / 2``: ``math.exp`` overflows for a
    steepness above ~1400, tanh never does.
    """
    if t <= 0.0:
        return 0.0
    if t >= 1.0:
        return 1.0
    half = math.tanh(steepness / 4.0)
    return (math.tanh(steepness * (t - 0.5) / 2.0) + half) / (2.0 * half)


CURVES = ("linear", "cosine", "sigmoid")


def curve_value(curve: str, t: float, steepness: float) -> float:
    if curve == "linear":
        return linear(t)
    if curve == "cosine":
        return cosine(t)
    if curve == "sigmoid":
        return sigmoid(t, steepness)
    raise ValueError(f"unknown alpha curve {curve!r}; expected one of {', '.join(CURVES)}")


@define
class AlphaSchedule:
    """Moves alpha from ``start`` to ``target`` over ``ticks`` epochs along ``curve``.

    One :meth:`tick` per epoch. Alpha never overshoots the target and equals it
    exactly on the last tick (no float residue from the curve).
    """

    curve: str = "linear"
    start: float = 0.0
    target: float = 1.0
    ticks: int = 5
    step: int = 0
    steepness: float = 10.0

    @property
    def value(self) -> float:
        if self.step >= self.ticks:
            return self.target
        frac = curve_value(self.curve, self.step / self.ticks, self.steepness)
        value = self.start + (self.target - self.start) * frac
        lo, hi = sorted((self.start, self.target))
        return min(max(value, lo), hi)

    @property
    def done(self) -> bool:
        return self.step >= self.ticks

    def tick(self) -> float:
        if self.step < self.ticks:
            self.step += 1
        return self.value

    def retarget(self, target: float, ticks: int) -> None:
        """Ramp from the current value to a new target."""
        self.start, self.target, self.ticks, self.step = self.value, target, ticks, 0


# ---------------------------------------------------------------- blend operators
# Each takes the host activation h, the seed output s, alpha broadcastable to h, and
# the seed's input; each is exactly h when alpha is 0.


def blend_add(
    h: torch.Tensor, s: torch.Tensor, alpha: torch.Tensor, seed_input: torch.Tensor
) -> torch.Tensor:
    return torch.lerp(h, s, alpha.to(h.dtype))


def blend_multiply(
    h: torch.Tensor, s: torch.Tensor, alpha: torch.Tensor, seed_input: torch.Tensor
) -> torch.Tensor:
    return h * (1 + alpha.to(h.dtype) * torch.tanh(s - seed_input))


BlendFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class BlendGate(nn.Module):
    """A learned gate g(seed_input) in [0, 1], one value per sample (and per position
    for sequences); the blend is ``lerp(h, s, alpha * g)``."""

    def __init__(self, channels: int, topology: str):
        super().__init__()
        self.topology = topology
        self.proj = nn.Linear(channels, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)  # g = 0.5 at birth

    def forward(self, seed_input: torch.Tensor) -> torch.Tensor:
        if self.topology == "cnn":
            pooled = seed_input.mean(dim=(2, 3))  # [B, C]
            return torch.sigmoid(self.proj(pooled))[:, :, None, None]  # [B, 1, 1, 1]
        return torch.sigmoid(self.proj(seed_input))  # [B, T, 1]


def blend_gated(
    h: torch.Tensor, s: torch.Tensor, alpha: torch.Tensor, gate_value: torch.Tensor
) -> torch.Tensor:
    return torch.lerp(h, s, (alpha.to(h.dtype) * gate_value.to(h.dtype)))


def broadcast_alpha(
    alpha: torch.Tensor | float, h: torch.Tensor, slot_id: str
) -> torch.Tensor | float:
    """An alpha override for activation ``h``: a float, or ``[B]`` per-sample values
    reshaped to broadcast over ``h``."""
    if isinstance(alpha, torch.Tensor) and alpha.dim() == 1:
        if alpha.shape[0] != h.shape[0]:
            raise ValueError(
                f"slot {slot_id}: per-sample alpha has {alpha.shape[0]} values "
                f"for a batch of {h.shape[0]}"
            )
        return alpha.view(-1, *([1] * (h.dim() - 1)))
    return alpha


def blend(
    operator: str,
    h: torch.Tensor,
    s: torch.Tensor,
    alpha: torch.Tensor,
    seed_input: torch.Tensor,
    gate_value: torch.Tensor | None = None,
    *,
    host_straight_through: bool = False,
) -> torch.Tensor:
    """Blend ``s`` into ``h`` with the style's ``operator`` ("add", "multiply", "gate");
    bit for bit ``h`` wherever alpha is 0 (a seed switched off is the host, even where
    ``lerp`` would round or turn a huge ``s`` into NaN).

    ``host_straight_through``: for an isolated seed (``seed_input`` detached), give the
    host its whole upstream gradient. The lerp passes only ``(1 - w) g`` to ``h`` for
    blend weight ``w``; adding ``w * (h - h.detach())`` (exactly zero in the forward
    pass) returns the missing ``w g``, as if the seed were the identity for the host.
    The multiply operator never scales the host's gradient down, so it needs no term.
    """
    if operator == "multiply":
        return torch.where(alpha == 0, h, blend_multiply(h, s, alpha, seed_input))
    if operator == "add":
        weight = alpha.to(h.dtype)
    else:
        assert gate_value is not None, "the gate operator needs the gate's value"
        weight = alpha.to(h.dtype) * gate_value.to(h.dtype)
    out = torch.lerp(h, s, weight)
    if host_straight_through:
        out = out + weight * (h - h.detach())
    return torch.where(alpha == 0, h, out)


@frozen
class Style:
    """A germination style pairs an alpha curve with a blend operator."""

    name: str
    curve: str
    operator: str  # "add", "multiply" or "gate"


STYLES: dict[str, Style] = {
    "linear_add": Style("linear_add", "linear", "add"),
    "cosine_add": Style("cosine_add", "cosine", "add"),
    "sigmoid_add": Style("sigmoid_add", "sigmoid", "add"),
    "linear_multiply": Style("linear_multiply", "linear", "multiply"),
    "gated": Style("gated", "linear", "gate"),
}
