"""The actor-critic of ``network = "slots"``: no tensor of it depends on the number of slots
or on the blueprint vocabulary, so one checkpoint acts on any host of the same schema.

Reading a step (the three parts of :mod:`esper_tamiyo_ppo.slot_features`):

- every slot's row, with the run-level features appended, goes through ONE shared
  encoder -> a slot embedding ``h_i``;
- the run-level features through their own encoder, concatenated with the mean and
  the max of the ``h_i`` (pooling: any number of slots, in any order; in schema 2 over
  the PRESENT slots only, so a padded slot changes nothing) -> the trunk
  ``t`` (then the LSTM, for ``trunk = "lstm"``), which the op and value heads read;
- the slot head scores each slot from ``[h_i, t, op one-hot]`` with one shared
  linear map: permuting the slots permutes the logits;
- the heads that read the chosen slot ``s`` see ``u = [h_s, t]``: the blueprint head
  scores each candidate's feature row ``c_sk`` with a shared MLP of ``[u, c_sk]`` (a
  blueprint installed after training is scored like the others); style, tempo and
  alpha target are linear heads of ``u`` (their vocabularies are the lifecycle's
  settings, not the host's).

The features of a step, ``[t | h_1..h_S | c_11..c_SK]``, are one flat tensor so the
learner handles them like the flat network's.
"""

from __future__ import annotations

import torch
from torch import nn

from esper_core.lifecycle.actions import HEADS, OPS, LifecycleOp
from esper_tamiyo_ppo.network import (
    POLICY_HEAD_GAIN,
    SLOT_CHILDREN,
    VALUE_HEAD_GAIN,
    State,
    layer_init,
    lstm_step,
    lstm_unroll,
    make_growth_head,
    make_lstm,
    trunk_growth_logits,
)
from esper_tamiyo_ppo.slot_layout import SlotLayout


def mlp(width: int, hidden_size: int, layers: int) -> nn.Sequential:
    """``layers`` Linear+tanh layers of width ``hidden_size``."""
    modules: list[nn.Module] = []
    for _ in range(layers):
        modules += [layer_init(nn.Linear(width, hidden_size)), nn.Tanh()]
        width = hidden_size
    return nn.Sequential(*modules)


def present_pool(h: torch.Tensor, present: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and max of ``h [..., S, H]`` over the slots ``present [..., S]`` marks; a
    step with none (a buffer row never written) pools to zeros."""
    weight = present.unsqueeze(-1).to(h.dtype)
    count = weight.sum(dim=-2).clamp(min=1.0)
    mean = (h * weight).sum(dim=-2) / count
    top = h.masked_fill(~present.unsqueeze(-1), float("-inf")).amax(dim=-2)
    return mean, torch.where(present.any(dim=-1, keepdim=True), top, torch.zeros_like(top))


class SlotActorCritic(nn.Module):
    """``layout``: this run's slot and blueprint counts (they shape the features, never a
    weight); ``head_sizes``: as for :class:`~esper_tamiyo_ppo.network.ActorCritic` (the
    rollout buffer's masks use the slot and blueprint sizes)."""

    def __init__(
        self,
        layout: SlotLayout,
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
        if layout.n_slots < 1:
            raise ValueError("the slots network needs a host with at least one slot")
        self.trunk = trunk
        self.layout = layout
        self.hidden_size = hidden_size
        self.head_sizes = {name: max(int(head_sizes[name]), 1) for name in HEADS}
        h, g = hidden_size, layout.global_dim
        self.slot_encoder = mlp(layout.slot_dim + g, h, mlp_layers)
        self.global_encoder = mlp(g, h, mlp_layers)
        self.pool = nn.Sequential(layer_init(nn.Linear(3 * h, h)), nn.Tanh())
        self.lstm = make_lstm(h) if trunk == "lstm" else None
        u = 2 * h  # what the heads of a chosen slot read: [h_s, t]
        self.heads = nn.ModuleDict(
            {
                "op": layer_init(nn.Linear(h, len(OPS)), gain=POLICY_HEAD_GAIN),
                "slot": layer_init(nn.Linear(u + len(OPS), 1), gain=POLICY_HEAD_GAIN),
                "blueprint": nn.Sequential(
                    layer_init(nn.Linear(u + layout.candidate_dim, h)),
                    nn.Tanh(),
                    layer_init(nn.Linear(h, 1), gain=POLICY_HEAD_GAIN),
                ),
                **{
                    name: layer_init(nn.Linear(u, self.head_sizes[name]), gain=POLICY_HEAD_GAIN)
                    for name in ("style", "tempo", "alpha_target")
                },
            }
        )
        self.value_head = layer_init(nn.Linear(h, 1), gain=VALUE_HEAD_GAIN)
        with torch.no_grad():  # a prior over the ops, before any update
            for op, bias in (op_bias or {}).items():
                self.heads["op"].bias[int(LifecycleOp[op])] = float(bias)
        self.growth_head = make_growth_head(h, host_growth)

    # ------------------------------------------------------------ trunk

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [..., total]`` -> features ``[..., H + S*H + S*K*D]`` (before the LSTM)."""
        run, slots, candidates = self.layout.split(obs)
        n = self.layout.n_slots
        context = run.unsqueeze(-2).expand(*run.shape[:-1], n, run.shape[-1])
        h = self.slot_encoder(torch.cat([slots, context], dim=-1))  # [..., S, H]
        if self.layout.has_presence:
            mean, top = present_pool(h, slots[..., -1] > 0.5)
        else:
            mean, top = h.mean(dim=-2), h.amax(dim=-2)
        pooled = torch.cat([self.global_encoder(run), mean, top], dim=-1)
        t = self.pool(pooled)
        return torch.cat([t, h.flatten(-2), candidates.flatten(-3)], dim=-1)

    def _parts(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """features ``[B, X]`` -> trunk ``[B, H]``, slot embeddings ``[B, S, H]``,
        candidates ``[B, S, K, D]``."""
        hs, n, k = self.hidden_size, self.layout.n_slots, self.layout.n_blueprints
        b = features.shape[0]
        t = features[:, :hs]
        h = features[:, hs : hs + n * hs].reshape(b, n, hs)
        return t, h, features[:, hs + n * hs :].reshape(b, n, k, self.layout.candidate_dim)

    def initial_state(self, batch: int) -> State:
        """Zero LSTM state ``(h, c)``, each ``[batch, hidden]`` (empty tensors for the MLP)."""
        width = self.hidden_size if self.lstm is not None else 0
        zeros = torch.zeros(batch, width, device=self.value_head.weight.device)
        return zeros, zeros.clone()

    def step(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One time step for a batch of envs: ``obs [B, total]`` -> features, next state.
        The LSTM carries the trunk only; the slot embeddings are of this step."""
        f = self.encode(obs)
        if self.lstm is None:
            return f, state
        hs = self.hidden_size
        t, next_state = lstm_step(self.lstm, f[:, :hs], state)
        return torch.cat([t, f[:, hs:]], dim=-1), next_state

    def unroll(self, obs: torch.Tensor, starts: torch.Tensor, state: State) -> torch.Tensor:
        """Features of sequences ``obs [L, B, total]`` (see ``ActorCritic.unroll``)."""
        f = self.encode(obs)
        if self.lstm is None:
            return f
        hs = self.hidden_size
        return torch.cat([lstm_unroll(self.lstm, f[..., :hs], starts, state), f[..., hs:]], -1)

    # ------------------------------------------------------------ heads

    def value(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_head(features[..., : self.hidden_size]).squeeze(-1)

    def op_logits(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.heads["op"](features[:, : self.hidden_size])
        return out

    def slot_logits(self, features: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
        """``[B, S]``: one shared score of ``[h_i, t, op one-hot]`` per slot."""
        t, h, _ = self._parts(features)
        n = self.layout.n_slots
        onehot = nn.functional.one_hot(op, len(OPS)).to(features.dtype)
        shared = torch.cat([t, onehot], dim=-1).unsqueeze(1).expand(-1, n, -1)
        out: torch.Tensor = self.heads["slot"](torch.cat([h, shared], dim=-1)).squeeze(-1)
        return out

    def child_logits(self, features: torch.Tensor, slot: torch.Tensor) -> dict[str, torch.Tensor]:
        """The heads that read the chosen ``slot [B]``; the blueprint head scores each
        candidate's features (one dummy choice when there are no blueprints, as the
        flat network has)."""
        t, h, candidates = self._parts(features)
        rows = torch.arange(features.shape[0], device=features.device)
        u = torch.cat([h[rows, slot], t], dim=-1)  # [B, 2H]
        logits = {name: self.heads[name](u) for name in ("style", "tempo", "alpha_target")}
        mine = candidates[rows, slot]  # [B, K, D]
        if mine.shape[1] == 0:
            logits["blueprint"] = torch.zeros(u.shape[0], 1, device=u.device, dtype=u.dtype)
        else:
            pairs = torch.cat([u.unsqueeze(1).expand(-1, mine.shape[1], -1), mine], dim=-1)
            logits["blueprint"] = self.heads["blueprint"](pairs).squeeze(-1)
        return {name: logits[name] for name in SLOT_CHILDREN}

    def growth_logits(self, features: torch.Tensor) -> torch.Tensor:
        return trunk_growth_logits(self, features)
