"""The factored actor-critic of ``network = "flat"``: a shared trunk (MLP, or MLP encoder
+ LSTM) over the flat feature vector, one categorical head per action part and a
separate value head. (``network = "slots"`` is :mod:`esper_tamiyo_ppo.slot_network`; both
offer the methods :func:`esper_tamiyo_ppo.distributions.run_heads` and the learner call.)

The op is decided first; the slot head sees the chosen op (one-hot) and the heads that
describe what to do in a slot (blueprint, style, tempo, alpha target) see the chosen
slot, so "prune slot 2" and "germinate slot 0" are distinct decisions. Sampling and
evaluation of the heads live in :mod:`esper_tamiyo_ppo.distributions`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Protocol

import torch
from torch import nn

from esper_core.lifecycle.actions import HEADS, LifecycleOp


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights, constant bias (CleanRL's initialisation)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


# What each head is conditioned on, besides the trunk features.
HEAD_CONDITION = {
    "op": None,
    "slot": "op",
    "blueprint": "slot",
    "style": "slot",
    "tempo": "slot",
    "alpha_target": "slot",
}
SLOT_CHILDREN = ("blueprint", "style", "tempo", "alpha_target")  # the heads that read the slot
POLICY_HEAD_GAIN = 0.01  # near-uniform initial policy
# The host-growth head (``host_growth`` on): 0 = not now, 1 = grow the host now.
GROWTH_CHOICES = 2
VALUE_HEAD_GAIN = 1.0

State = tuple[torch.Tensor, torch.Tensor]


class PolicyNetwork(Protocol):
    """What the heads, the loss and the policy need from a network (both kinds have it).

    ``features`` is whatever :meth:`encode` returns for a step, ``[B, X]``: the trunk
    output for the flat network; the trunk output, every slot's embedding and every
    candidate's features for the slots network. Only the network reads inside it."""

    lstm: nn.LSTM | None
    hidden_size: int
    head_sizes: dict[str, int]
    value_head: nn.Linear
    growth_head: nn.Linear | None  # None: the policy does not grow the host

    def encode(self, obs: torch.Tensor) -> torch.Tensor: ...
    def initial_state(self, batch: int) -> State: ...
    def step(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, State]: ...
    def unroll(self, obs: torch.Tensor, starts: torch.Tensor, state: State) -> torch.Tensor: ...
    def value(self, features: torch.Tensor) -> torch.Tensor: ...
    def op_logits(self, features: torch.Tensor) -> torch.Tensor: ...
    def slot_logits(self, features: torch.Tensor, op: torch.Tensor) -> torch.Tensor: ...
    def child_logits(
        self, features: torch.Tensor, slot: torch.Tensor
    ) -> dict[str, torch.Tensor]: ...
    def growth_logits(self, features: torch.Tensor) -> torch.Tensor: ...
    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...


def make_growth_head(hidden_size: int, host_growth: bool) -> nn.Linear | None:
    """The host-growth head over the trunk, or None. Built after every other layer, so a
    network without it draws the same initial weights as before it existed."""
    if not host_growth:
        return None
    return layer_init(nn.Linear(hidden_size, GROWTH_CHOICES), gain=POLICY_HEAD_GAIN)


def trunk_growth_logits(net: PolicyNetwork, features: torch.Tensor) -> torch.Tensor:
    """``[B, 2]``: not now / now, from the trunk part of ``features`` (both networks put
    the trunk output first)."""
    if net.growth_head is None:
        raise ValueError("this policy network has no host-growth head (host_growth = off)")
    out: torch.Tensor = net.growth_head(features[..., : net.hidden_size])
    return out


def make_lstm(hidden_size: int) -> nn.LSTM:
    """The LSTM of ``trunk = "lstm"``: orthogonal weights, zero biases."""
    lstm = nn.LSTM(hidden_size, hidden_size)
    for name, param in lstm.named_parameters():
        if "bias" in name:
            nn.init.constant_(param, 0.0)
        else:
            nn.init.orthogonal_(param, 1.0)
    return lstm


def lstm_step(lstm: nn.LSTM, z: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
    """One time step of ``z [B, H]`` from ``state``."""
    h, c = state
    out, (h1, c1) = lstm(z.unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))
    return out.squeeze(0), (h1.squeeze(0), c1.squeeze(0))


def lstm_unroll(lstm: nn.LSTM, z: torch.Tensor, starts: torch.Tensor, state: State) -> torch.Tensor:
    """Outputs of ``z [L, B, H]``, the state zeroed where ``starts [L, B]`` marks the first
    step of a segment (after a terminal)."""
    h, c = state
    keep = (~starts).to(z.dtype).unsqueeze(-1)
    outputs = []
    for t in range(z.shape[0]):
        out, (h, c) = lstm_step(lstm, z[t], (h * keep[t], c * keep[t]))
        outputs.append(out)
    return torch.stack(outputs)


class ActorCritic(nn.Module):
    """``head_sizes`` maps every name of :data:`esper_core.lifecycle.actions.HEADS` to its size
    (a head of size 0, e.g. no blueprints, gets one dummy choice that masks never use)."""

    def __init__(
        self,
        feature_dim: int,
        head_sizes: dict[str, int],
        trunk: str = "mlp",
        hidden_size: int = 128,
        mlp_layers: int = 2,
        op_bias: dict[str, float] | None = None,
        host_growth: bool = False,
    ) -> None:
        super().__init__()
        if trunk not in ("mlp", "lstm"):
            raise ValueError(f"unknown trunk {trunk!r}; expected mlp or lstm")
        self.trunk = trunk
        self.hidden_size = hidden_size
        self.head_sizes = {name: max(int(head_sizes[name]), 1) for name in HEADS}
        layers: list[nn.Module] = []
        width = feature_dim
        for _ in range(mlp_layers):
            layers += [layer_init(nn.Linear(width, hidden_size)), nn.Tanh()]
            width = hidden_size
        self.encoder = nn.Sequential(*layers)
        self.lstm = make_lstm(hidden_size) if trunk == "lstm" else None
        self.heads = nn.ModuleDict(
            {
                name: layer_init(
                    nn.Linear(hidden_size + self._condition_size(name), self.head_sizes[name]),
                    gain=POLICY_HEAD_GAIN,
                )
                for name in HEADS
            }
        )
        self.value_head = layer_init(nn.Linear(hidden_size, 1), gain=VALUE_HEAD_GAIN)
        with torch.no_grad():  # a prior over the ops, before any update
            for op, bias in (op_bias or {}).items():
                self.heads["op"].bias[int(LifecycleOp[op])] = float(bias)
        self.growth_head = make_growth_head(hidden_size, host_growth)

    def _condition_size(self, head: str) -> int:
        condition = HEAD_CONDITION[head]
        return 0 if condition is None else self.head_sizes[condition]

    # ------------------------------------------------------------ trunk

    def initial_state(self, batch: int) -> State:
        """Zero LSTM state ``(h, c)``, each ``[batch, hidden]`` (empty tensors for the MLP)."""
        width = self.hidden_size if self.lstm is not None else 0
        zeros = torch.zeros(batch, width, device=self.value_head.weight.device)
        return zeros, zeros.clone()

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """The MLP encoder's output for ``obs [..., D]`` (the features, for the MLP trunk)."""
        out: torch.Tensor = self.encoder(obs)
        return out

    def step(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One time step for a batch of envs: ``obs [B, D]`` -> features ``[B, H]``, next state."""
        z = self.encoder(obs)
        if self.lstm is None:
            return z, state
        return lstm_step(self.lstm, z, state)

    def unroll(self, obs: torch.Tensor, starts: torch.Tensor, state: State) -> torch.Tensor:
        """Features of sequences ``obs [L, B, D]``; the LSTM state is zeroed where
        ``starts [L, B]`` marks the first step of a segment (after a terminal)."""
        z = self.encoder(obs)
        if self.lstm is None:
            return z
        return lstm_unroll(self.lstm, z, starts, state)

    # ------------------------------------------------------------ heads

    def value(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_head(features).squeeze(-1)

    def conditioned(self, features: torch.Tensor, parent: str, index: torch.Tensor) -> torch.Tensor:
        """The input of the heads conditioned on ``parent``: features and the chosen index, one-hot."""
        onehot = nn.functional.one_hot(index, self.head_sizes[parent]).to(features.dtype)
        return torch.cat([features, onehot], dim=-1)

    def op_logits(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.heads["op"](features)
        return out

    def slot_logits(self, features: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
        """``[B, n_slots]``, given the chosen ``op [B]``."""
        out: torch.Tensor = self.heads["slot"](self.conditioned(features, "op", op))
        return out

    def child_logits(self, features: torch.Tensor, slot: torch.Tensor) -> dict[str, torch.Tensor]:
        """The logits of every head that reads the chosen ``slot [B]``."""
        inputs = self.conditioned(features, "slot", slot)
        return {head: self.heads[head](inputs) for head in SLOT_CHILDREN}

    def growth_logits(self, features: torch.Tensor) -> torch.Tensor:
        return trunk_growth_logits(self, features)
