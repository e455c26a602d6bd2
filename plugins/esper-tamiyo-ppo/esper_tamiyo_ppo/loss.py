"""The PPO loss of one minibatch, or of one rank's slice of it (data parallelism).

:class:`Share` turns sums over a rank's slice into that slice's share of the whole
minibatch's mean, scaled by the number of ranks: the mean over the ranks (the gradient
all-reduce) is then the whole minibatch's value. With one rank it is the plain mean.
"""

from __future__ import annotations

import torch
from attrs import frozen

from esper_core.lifecycle.actions import HEADS
from esper_tamiyo_ppo.distributions import BatchMasks, run_heads
from esper_tamiyo_ppo.network import PolicyNetwork
from esper_tamiyo_ppo.options import PPOOptions

ADV_EPS = 1e-8
# A minibatch's statistics are packed in one tensor so an epoch sums them in one go:
# these scalars, then the entropy summed per head and the entries counted per head
# (both only where the op used the head). ``n_ratios`` counts the ratios the clip acts on:
# one per used head (per-head clip) or one per sample (joint clip).
SCALAR_STATS = (
    "pg_loss",
    "v_loss",
    "entropy",
    "approx_kl",
    "ratio_deviation",
    "n_clipped",
    "n_ratios",
)
N_SCALARS, N_HEADS = len(SCALAR_STATS), len(HEADS)


@frozen
class FlatRollout:
    """The rollout flattened to ``[n_envs * T, ...]`` and the chunk layout indexing it."""

    obs: torch.Tensor
    starts: torch.Tensor
    state_h: torch.Tensor
    state_c: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    returns: torch.Tensor
    advantages: torch.Tensor
    masks: BatchMasks
    positions: torch.Tensor  # [L, n_chunks]
    padding: torch.Tensor | None  # [L, n_chunks] validity, None when nothing is padded


def _mean(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if weight is None else (x * weight).sum() / weight.sum()


class Share:
    """Means over a whole minibatch from this rank's slice of it (see the module docstring).

    With one rank it is the plain (weighted) mean."""

    def __init__(self, world: int, total: torch.Tensor | None) -> None:
        self.world = world
        self.total = total  # the minibatch's total weight (sample count); None: one rank

    def mean(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        if self.total is None:
            return _mean(x, weight)
        summed = x.sum() if weight is None else (x * weight).sum()
        return summed * (self.world / self.total)

    def count(self, x: torch.Tensor) -> torch.Tensor:
        """A sum over the slice, scaled so that the mean over the ranks is the whole sum."""
        return x if self.total is None else x * self.world


def ppo_loss(
    net: PolicyNetwork,
    o: PPOOptions,
    part: torch.Tensor,
    b: FlatRollout,
    ent_coef: float,
    share: Share,
    whole_i: torch.Tensor,
    whole_weight: torch.Tensor | None,
    used_table: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO loss of the chunks ``part`` of ``b`` and their packed statistics."""
    mb_positions = b.positions[:, part]
    i = mb_positions.flatten()
    weight = None if b.padding is None else b.padding[:, part].flatten().to(b.values.dtype)

    # Evaluate: the trunk features of the stored (normalised) observations.
    if net.lstm is None:
        features = net.encode(b.obs[i])
    else:
        shape = mb_positions.shape
        state = (b.state_h[mb_positions[0]], b.state_c[mb_positions[0]])
        obs, starts = b.obs[i].view(*shape, -1), b.starts[i].view(shape)
        features = net.unroll(obs, starts, state).flatten(0, 1)
    mb_advantages = b.advantages[i]
    if o.normalize_advantages:
        # Over the whole minibatch (every rank holds the rollout), not just this slice.
        whole = b.advantages[whole_i]
        if whole_weight is None:
            std, mean = torch.std_mean(whole, correction=0)
        else:
            mean = _mean(whole, whole_weight)
            std = _mean((whole - mean) ** 2, whole_weight).sqrt()
        mb_advantages = (mb_advantages - mean) / (std + ADV_EPS)
    # ... and the stored actions under the stored masks.
    out = run_heads(
        net,
        features,
        b.masks.map(lambda m, i=i: m[i]),
        actions=b.actions[i],
        used_table=used_table,
    )

    used = out.used.to(features.dtype)
    log_ratio = out.log_probs - b.log_probs[i]  # 0 in the heads the op ignores
    if o.ratio_clip == "joint":
        # The standard PPO for a factored action (CleanRL's MultiDiscrete, SB3): one ratio,
        # the product of the used heads' ratios, clipped once.
        ratio = log_ratio.sum(1, keepdim=True).exp()
        clipped_over = torch.ones_like(ratio)
    else:
        # A clipped surrogate per head, summed over the heads the op used.
        ratio = log_ratio.exp()
        clipped_over = used
    neg_adv = -mb_advantages.unsqueeze(1)
    surrogate = torch.max(
        neg_adv * ratio, neg_adv * ratio.clamp(1.0 - o.clip_coef, 1.0 + o.clip_coef)
    )
    pg_loss = share.mean((surrogate * clipped_over).sum(1), weight)
    # Value loss, clipped around the rollout's values.
    new_values = net.value(features)
    old_values, mb_returns = b.values[i], b.returns[i]
    v_loss = (new_values - mb_returns) ** 2
    if o.clip_value_loss:
        clipped = old_values + (new_values - old_values).clamp(-o.clip_coef, o.clip_coef)
        v_loss = torch.max(v_loss, (clipped - mb_returns) ** 2)
    v_loss = 0.5 * share.mean(v_loss, weight)
    # Entropy bonus over the used heads.
    entropy = share.mean(out.entropies.sum(1), weight)
    loss = pg_loss - ent_coef * entropy + o.vf_coef * v_loss

    with torch.no_grad():
        joint = log_ratio.sum(1)
        approx_kl = share.mean((joint.exp() - 1.0) - joint, weight)
        deviation = (ratio - 1.0).abs()  # 0 in unused heads: their ratio is exactly 1
        head_entropy = out.entropies
        if weight is not None:
            used = used * weight.unsqueeze(1)
            clipped_over = clipped_over * weight.unsqueeze(1)
            deviation = deviation * weight.unsqueeze(1)
            head_entropy = head_entropy * weight.unsqueeze(1)
        n_clipped = (deviation > o.clip_coef).sum(dtype=deviation.dtype)
        scalars = (
            pg_loss,
            v_loss,
            entropy,
            approx_kl,
            share.count(deviation.sum()),
            share.count(n_clipped),
            share.count(clipped_over.sum()),
        )
        stats = torch.cat(
            [
                torch.stack(scalars),
                share.count(head_entropy.sum(0)),
                share.count(used.sum(0)),
            ]
        )
    return loss, stats
