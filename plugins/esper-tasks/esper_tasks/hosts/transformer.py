"""The transformer host: a GPT-style decoder with a slot after every group of blocks."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from esper_core.components.host import InjectionSpec, WidthSite, slot_id


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        shape = (b, t, self.n_head, c // self.n_head)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, d_model: int, expansion: int = 4) -> None:
        super().__init__()
        self.expansion = expansion
        self.fc1 = nn.Linear(d_model, expansion * d_model)
        self.fc2 = nn.Linear(expansion * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm residual block: attention then MLP."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def _init_module(
    module: nn.Module,
    std: float,
    residual_std: float,
    residual: tuple[str, ...],
    generator: torch.Generator | None = None,
) -> None:
    """GPT-2 initialisation of ``module``'s linear layers and embeddings: normal weights,
    zero biases, and the residual projections (names ending in ``residual``) smaller."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std, generator=generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std, generator=generator)
    for name, param in module.named_parameters():
        if name.endswith(tuple(f"{r}.weight" for r in residual)):
            nn.init.normal_(param, std=residual_std, generator=generator)


class TransformerHost(nn.Module):
    """Token + learned position embeddings, ``n_layer`` blocks, final LayerNorm, tied head.

    The blocks form ``n_segments`` equal segments; slot ``r0c{i}`` (``d_model``
    features) sits after segment ``i``. Inputs are ``[B, T]`` token ids with
    ``T <= block_size``; outputs are ``[B, T, vocab_size]`` logits. No dropout, so
    training consumes no random numbers.

    ``d_model`` can grow (``esper_core.components.host.WidenableTransformer``): heads
    keep their dimension ``d_model / n_head``, so their number grows with it, and the
    MLPs' hidden width stays ``4 x d_model``. Its stack can grow deeper
    (``esper_core.components.host.DeepenableTransformer``): new blocks go on top of the
    last segment, so the segments need not stay equal after a depth growth.
    """

    topology = "transformer"

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        d_model: int,
        n_layer: int,
        n_head: int,
        n_segments: int,
    ) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model {d_model} is not divisible by n_head {n_head}")
        if n_segments < 1 or n_layer % n_segments:
            raise ValueError(f"n_layer {n_layer} is not divisible into {n_segments} segments")
        self.block_size = block_size
        self.d_model, self.n_layer = d_model, n_layer
        self.head_dim = d_model // n_head
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        per = n_layer // n_segments
        self.segments = nn.ModuleList(
            nn.Sequential(*(Block(d_model, n_head) for _ in range(per))) for _ in range(n_segments)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self._specs = self._injection_specs()
        self._init_weights(n_layer)

    def _injection_specs(self) -> tuple[InjectionSpec, ...]:
        return tuple(
            InjectionSpec(
                slot_id=slot_id(0, i), channels=self.d_model, topology=self.topology, segment=i
            )
            for i in range(len(self.segments))
        )

    # GPT-2 initialisation: small weights keep the initial logits near uniform
    # (loss ~ ln(vocab)); residual projections shrink with depth.
    INIT_STD: ClassVar[float] = 0.02
    RESIDUAL: ClassVar[tuple[str, ...]] = ("attn.proj", "mlp.fc2")

    def _residual_std(self) -> float:
        return self.INIT_STD / math.sqrt(2 * self.n_layer)

    def _init_weights(self, n_layer: int) -> None:
        _init_module(self, self.INIT_STD, self._residual_std(), self.RESIDUAL)

    # ------------------------------------------------------------ width growth

    def stage_channels(self) -> tuple[int, ...]:
        """The residual width, for host width growth (``WidenableTransformer``)."""
        return (self.d_model,)

    def set_stage_channels(self, channels: tuple[int, ...]) -> None:
        """The residual width after a width growth replaced the modules: as many heads
        of the same size as fit it; the slots follow."""
        (width,) = channels
        if width % self.head_dim:
            raise ValueError(
                f"d_model {width} is not a multiple of the head dimension {self.head_dim}"
            )
        self.d_model = width
        for module in self.modules():
            if isinstance(module, CausalSelfAttention):
                module.n_head = width // self.head_dim
        self._specs = self._injection_specs()

    def width_step(self) -> int:
        return self.head_dim

    def width_sites(self) -> tuple[WidthSite, ...]:
        """Every module that reads or writes the residual width, in the order of the
        forward pass (the tied head after the embedding it reads)."""
        std = self.INIT_STD
        sites = [WidthSite("tok_emb", 0, 1, std=std), WidthSite("pos_emb", 0, 1, std=std)]

        def linear(path: str, reads: int, writes: int, groups: int = 1) -> WidthSite:
            residual = path.endswith(self.RESIDUAL)
            return WidthSite(path, reads, writes, groups, self._residual_std() if residual else std)

        for i, segment in enumerate(self.segments):
            for j, block in enumerate(segment):
                p = f"segments.{i}.{j}"
                hidden = block.mlp.expansion
                sites += [
                    WidthSite(f"{p}.ln1", 1, 1),
                    linear(f"{p}.attn.qkv", 1, 1, groups=3),
                    linear(f"{p}.attn.proj", 1, 1),
                    WidthSite(f"{p}.ln2", 1, 1),
                    linear(f"{p}.mlp.fc1", 1, hidden),
                    linear(f"{p}.mlp.fc2", hidden, 1),
                ]
        sites += [WidthSite("ln_f", 1, 1), WidthSite("head", 1, 0, tied_to="tok_emb")]
        return tuple(sites)

    # ------------------------------------------------------------ depth growth

    def residual_blocks(self) -> tuple[nn.Module, ...]:
        """Every block, for host depth growth (``DeepenableTransformer``)."""
        return tuple(block for segment in self.segments for block in segment)

    def top_stage(self) -> nn.Sequential:
        top: nn.Sequential = self.segments[-1]
        return top

    def new_block(self, generator: torch.Generator, n_layer: int) -> nn.Module:
        """A block of the current width, initialised as in a host of ``n_layer`` blocks."""
        with torch.random.fork_rng(devices=[]):  # torch's own init draws: leave no trace
            block = Block(self.d_model, self.d_model // self.head_dim)
        residual = self.INIT_STD / math.sqrt(2 * n_layer)
        _init_module(block, self.INIT_STD, residual, self.RESIDUAL, generator)
        return block

    def set_depth(self, n_layer: int) -> None:
        self.n_layer = n_layer

    def num_segments(self) -> int:
        return len(self.segments)

    def block_before(self, slot: str) -> nn.Module:
        """The last block of the segment that slot ``slot`` follows: what a stacking birth
        (``lifecycle.stack_blocks``) copies into a ``transformer/block`` seed there."""
        spec = next(s for s in self._specs if s.slot_id == slot)
        block: nn.Module = self.segments[spec.segment][-1]
        return block

    def injection_specs(self) -> tuple[InjectionSpec, ...]:
        return self._specs

    def forward_segment(self, index: int, x: torch.Tensor) -> torch.Tensor:
        if index == 0:
            t = x.shape[1]
            if t > self.block_size:
                raise ValueError(f"sequence length {t} exceeds the block size {self.block_size}")
            pos = torch.arange(t, device=x.device)
            x = self.tok_emb(x) + self.pos_emb(pos)
        return self.segments[index](x)

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.num_segments()):
            x = self.forward_segment(i, x)
        return self.forward_head(x)
