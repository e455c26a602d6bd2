"""Seed modules for transformer hosts: ``[B, T, C] -> [B, T, C]`` at any T.

Every module returns the full activation (residual form), because the slot blends
``lerp(h, seed(h), alpha)``. Nothing looks ahead in time: a seed in a causal model
must keep position ``t`` independent of positions after ``t``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def num_heads(channels: int, max_heads: int = 4, min_head_dim: int = 8) -> int:
    """Most heads (at most ``max_heads``) dividing ``channels`` with ``min_head_dim`` each."""
    for heads in range(max_heads, 0, -1):
        if channels % heads == 0 and channels // heads >= min_head_dim:
            return heads
    return 1


def gpt2_init(*linears: nn.Linear) -> None:
    """The transformer hosts' initialisation (GPT-2's: weights N(0, 0.02), zero biases), so a
    seed's layers start like the host layers of the same kind and a seed block differs from
    a host block only where identity at birth requires it (zero output projections)."""
    for linear in linears:
        nn.init.normal_(linear.weight, std=0.02)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)


class NormSeed(nn.Module):
    """``x + LayerNorm(x)`` with the norm's affine scale and shift initialised to zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)
        nn.init.zeros_(self.norm.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(x)


class LoRASeed(nn.Module):
    """``x + up(down(x))``: a rank-``rank`` linear update, ``up`` initialised to zero."""

    def __init__(self, channels: int, rank: int) -> None:
        super().__init__()
        self.down = nn.Linear(channels, rank, bias=False)
        self.up = nn.Linear(rank, channels, bias=False)
        gpt2_init(self.down)
        nn.init.zeros_(self.up.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(self.down(x))


class AttentionSeed(nn.Module):
    """``x + proj(causal_self_attention(LN(x)))`` with ``proj`` initialised to zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.n_head = num_heads(channels)
        self.norm = nn.LayerNorm(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.proj = nn.Linear(channels, channels)
        gpt2_init(self.qkv)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    # The head count is state, not a function of the width: a stacked block takes its
    # host block's (BlockSeed.inherit), and a seed rebuilt from its blueprint (a resume,
    # a governor rollback) must compute what the saved one did.
    def get_extra_state(self) -> dict[str, int]:
        return {"n_head": self.n_head}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.n_head = int(state["n_head"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=2)
        shape = (b, t, self.n_head, c // self.n_head)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLPSeed(nn.Module):
    """``x + fc2(gelu(fc1(LN(x))))`` with hidden width ``expansion * C``."""

    def __init__(self, channels: int, expansion: int, zero_init: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)
        self.fc1 = nn.Linear(channels, expansion * channels)
        self.fc2 = nn.Linear(expansion * channels, channels)
        gpt2_init(self.fc1, self.fc2)
        if zero_init:
            nn.init.zeros_(self.fc2.weight)
            nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class BlockSeed(nn.Module):
    """A whole pre-norm transformer block, ``x + attn(LN(x))`` then ``+ MLP(LN(.))`` (4x),
    with both output projections initialised to zero: the identity at birth, so depth
    grows by a block without changing the function (the MSG / LiGO condition)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.attention = AttentionSeed(channels)
        self.mlp = MLPSeed(channels, expansion=4, zero_init=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x))

    def inherit(self, block: nn.Module) -> None:
        """Become a copy of a GPT-style host block (G_stack): ``ln1``, ``attn.qkv``,
        ``attn.proj``, ``ln2``, ``mlp.fc1`` and ``mlp.fc2`` of the same width, and the
        block's head count (``attn.n_head``), so the copy computes what the block does."""
        pairs = {
            "attention.norm": "ln1",
            "attention.qkv": "attn.qkv",
            "attention.proj": "attn.proj",
            "mlp.norm": "ln2",
            "mlp.fc1": "mlp.fc1",
            "mlp.fc2": "mlp.fc2",
        }
        try:
            sources = {mine: block.get_submodule(theirs) for mine, theirs in pairs.items()}
            n_head = int(block.get_submodule("attn").n_head)
        except AttributeError as exc:
            raise ValueError(
                f"a transformer/block seed can stack only a GPT-style block with "
                f"{', '.join(pairs.values())} and attn.n_head: {exc}"
            ) from None
        for mine, source in sources.items():
            self.get_submodule(mine).load_state_dict(source.state_dict())
        self.attention.n_head = n_head
