"""The PPO update, laid out like CleanRL's ``ppo.py``: :meth:`PPOLearner.update` reads top
to bottom.

1. GAE: advantages and returns over each env's segments (:mod:`esper_tamiyo_ppo.gae`).
2. K epochs, each a random pass over the rollout in minibatches. Per minibatch: evaluate
   the stored actions under the stored masks and take the loss (:func:`~esper_tamiyo_ppo.loss.ppo_loss`:
   normalised advantages, the clipped surrogate of every head the op used summed over
   those heads, the clipped value loss and the entropy bonus); stop the whole update
   once the approximate KL exceeds ``kl_stop_factor x target_kl`` (checked before that
   minibatch's step); else backpropagate, let the optional ``gradient_sync`` hook combine
   gradients across processes, clip the global gradient norm and step Adam.
3. Diagnostics.

Data parallelism (``shard`` = (rank, world), set with ``gradient_sync`` by the
distributed executor): every rank holds the whole rollout and draws the same minibatches,
but runs the forward and backward pass of its own slice of each minibatch only. Each
rank's loss is its slice's share of the minibatch mean (times ``world``), so the
all-reduced mean of the gradients is the whole minibatch's gradient; the minibatch's
statistics (approximate KL included) are reduced in the same all-reduce, so every rank
takes the same early-stop decision and ends the update with identical parameters.

Minibatches are built from *chunks* of consecutive steps of one env: single steps for
the MLP, sequences (the whole rollout by default, or ``lstm_chunk_length``) for the LSTM,
which replays each chunk from the state stored at its first step and resets the state
at segment starts. A shorter last chunk is padded; padding has weight 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import nn

from esper_tamiyo_ppo.buffer import RolloutBuffer
from esper_tamiyo_ppo.distributions import head_names, used_heads_table
from esper_tamiyo_ppo.gae import compute_gae
from esper_tamiyo_ppo.loss import (
    N_SCALARS,
    SCALAR_STATS,
    FlatRollout,
    Share,
    ppo_loss,
)
from esper_tamiyo_ppo.network import PolicyNetwork
from esper_tamiyo_ppo.options import PPOOptions

GradientSync = Callable[[list[torch.Tensor]], None]


def chunk_layout(
    n_envs: int, n_steps: int, length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All chunks of ``length`` consecutive steps: env and time indices ``[length, n_chunks]``
    and a validity mask (the last chunk of a row is padded by repeating its final step)."""
    per_env = math.ceil(n_steps / length)
    offsets = torch.arange(length).unsqueeze(1)  # [L, 1]
    starts = torch.arange(per_env) * length  # [per_env]
    times = (starts.unsqueeze(0) + offsets).repeat(1, n_envs)  # [L, n_envs * per_env]
    envs = torch.arange(n_envs).repeat_interleave(per_env).unsqueeze(0).expand(length, -1)
    valid = times < n_steps
    return envs.contiguous(), times.clamp(max=n_steps - 1), valid


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var() / var)


class PPOLearner:
    """Owns the optimiser and the schedules; :meth:`update` runs one PPO update."""

    def __init__(
        self,
        net: PolicyNetwork,
        options: PPOOptions,
        *,
        gamma: float,
        total_updates: int,
        generator: torch.Generator,
    ) -> None:
        self.net = net
        # The action's heads, in the order of their columns (the growth head last, if any).
        self.heads = head_names(net.growth_head is not None)
        self.options = options
        self.gamma = gamma  # the run's γ: GAE discounts with the γ the rewards were shaped with
        self.total_updates = total_updates
        self.generator = generator  # shuffles the minibatches
        # Fused Adam: one kernel for all parameters instead of a Python loop over them,
        # which dominates the step for a network this small (about 3x faster on CPU).
        device_type = net.value_head.weight.device.type
        self.optimizer = torch.optim.Adam(
            net.parameters(),
            lr=options.learning_rate,
            eps=options.adam_eps,
            fused=True if device_type in ("cpu", "cuda") else None,
        )
        # Extension point for data-parallel training (the distributed executor): called
        # with the gradients of every parameter after backward() and before clipping and
        # the optimiser step, e.g. to all-reduce (average) them across ranks so every rank
        # keeps an identical policy. It must modify the tensors in place.
        self.gradient_sync: GradientSync | None = None
        # (rank, world): the slice of every minibatch this process computes; set together
        # with gradient_sync, which must then average over exactly those ``world`` ranks.
        self.shard: tuple[int, int] = (0, 1)
        self._used_table = used_heads_table(net.value_head.weight.device)

    def learning_rate(self, update_index: int) -> float:
        """Linear decay from ``learning_rate`` towards 0 over ``total_updates``."""
        o = self.options
        if not o.anneal_lr or self.total_updates <= 0:
            return o.learning_rate
        return o.learning_rate * max(1.0 - update_index / self.total_updates, 0.0)

    def entropy_coef(self, update_index: int) -> float:
        """Linear from ``ent_coef`` (first update) to ``ent_coef_final`` (last update)."""
        o = self.options
        if self.total_updates <= 1:
            return o.ent_coef
        frac = min(update_index / (self.total_updates - 1), 1.0)
        return o.ent_coef + frac * (o.ent_coef_final - o.ent_coef)

    def update(
        self,
        rollout: RolloutBuffer,
        rewards: torch.Tensor,
        last_values: torch.Tensor,
        update_index: int,
    ) -> dict[str, float]:
        """One PPO update on a full ``rollout``; ``rewards [n_envs, T]`` are its (scaled)
        rewards and ``last_values [n_envs]`` V of the observation after its last step."""
        o, net = self.options, self.net
        started = time.perf_counter()
        lr = self.learning_rate(update_index)
        ent_coef = self.entropy_coef(update_index)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        # ---- 1. Advantages and returns.
        advantages, returns = compute_gae(
            rewards, rollout.values, rollout.terminals, last_values, self.gamma, o.gae_lambda
        )

        # ---- The rollout flattened to [n_envs * T, ...] (views). A minibatch indexes it
        # with chunks laid out [L, C] (time, chunk): time-major, so the LSTM output lines
        # up with the flattened indices.
        n_envs, n_steps = rollout.values.shape
        b_obs, b_starts = rollout.obs.flatten(0, 1), rollout.starts.flatten(0, 1)
        b_state_h, b_state_c = rollout.state_h.flatten(0, 1), rollout.state_c.flatten(0, 1)
        b_actions, b_log_probs = rollout.actions.flatten(0, 1), rollout.log_probs.flatten(0, 1)
        b_values, b_returns = rollout.values.flatten(0, 1), returns.flatten(0, 1)
        b_advantages = advantages.flatten(0, 1)
        b_masks = rollout.masks().map(lambda m: m.flatten(0, 1))
        if net.lstm is None:
            length = 1
        else:
            length = o.lstm_chunk_length if 0 < o.lstm_chunk_length < n_steps else n_steps
        envs, times, in_range = chunk_layout(n_envs, n_steps, length)
        positions = envs * n_steps + times  # [L, n_chunks]
        padding = None if bool(in_range.all()) else in_range
        n_chunks = positions.shape[1]
        batch = FlatRollout(
            obs=b_obs,
            starts=b_starts,
            state_h=b_state_h,
            state_c=b_state_c,
            actions=b_actions,
            log_probs=b_log_probs,
            values=b_values,
            returns=b_returns,
            advantages=b_advantages,
            masks=b_masks,
            positions=positions,
            padding=padding,
        )

        # ---- 2. K epochs of minibatches.
        epochs: list[list[torch.Tensor]] = []  # per epoch, per minibatch: packed statistics
        stop = False
        kl_limit = o.kl_stop_factor * o.target_kl if o.target_kl > 0 else math.inf
        n_run = 0  # minibatches so far: rotates which rank takes a bigger slice
        for _epoch in range(o.update_epochs):
            done: list[torch.Tensor] = []
            order = torch.randperm(n_chunks, generator=self.generator)
            for part in torch.tensor_split(order, min(o.num_minibatches, n_chunks)):
                stats = self._minibatch(part, batch, ent_coef, kl_limit, n_run)
                n_run += 1
                if stats is None:  # the approximate KL went over the limit
                    stop = True
                    break
                done.append(stats)
            if done:
                epochs.append(done)
            if stop:
                break

        # ---- 3. Diagnostics: means over the minibatches run, per head and per epoch.
        diagnostics = self._diagnostics(self.heads, epochs, stop, b_values, b_returns, lr, ent_coef)
        diagnostics["update_time"] = time.perf_counter() - started
        return diagnostics

    def _minibatch(
        self, part: torch.Tensor, b: FlatRollout, ent_coef: float, kl_limit: float, index: int
    ) -> torch.Tensor | None:
        """Train on the minibatch of chunks ``part`` (this rank's slice of it: the slices
        rotate with the minibatch ``index``, so uneven ones even out); return its packed
        statistics, or None when the approximate KL stops the update before its step."""
        o, net = self.options, self.net
        rank, world = self.shard
        whole_i = b.positions[:, part].flatten()
        whole_weight = (
            None if b.padding is None else b.padding[:, part].flatten().to(b.values.dtype)
        )
        if world > 1:
            part = torch.tensor_split(part, world)[(rank + index) % world]
            total = whole_weight.sum() if whole_weight is not None else whole_i.numel()
            share = Share(world, torch.as_tensor(total, dtype=b.values.dtype))
        else:
            share = Share(1, None)
        if part.numel() == 0:  # a minibatch of fewer chunks than ranks: nothing here
            device = b.values.device
            loss = sum((p.sum() * 0.0 for p in net.parameters()), torch.zeros((), device=device))
            stats = torch.zeros(
                N_SCALARS + 2 * len(self.heads), device=device, dtype=b.values.dtype
            )
        else:
            loss, stats = ppo_loss(
                net, o, part, b, ent_coef, share, whole_i, whole_weight, self._used_table
            )
        if self.gradient_sync is None:
            if float(stats[SCALAR_STATS.index("approx_kl")]) > kl_limit:
                return None
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
        else:
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if world > 1:  # every rank must send a vector of the same layout
                for p in net.parameters():
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
            grads = [p.grad for p in net.parameters() if p.grad is not None]
            # One all-reduce: the minibatch's statistics (so every rank sees the whole
            # minibatch's approximate KL and stops alike) and its gradient.
            self.gradient_sync([stats, *grads])
            if float(stats[SCALAR_STATS.index("approx_kl")]) > kl_limit:
                return None
        nn.utils.clip_grad_norm_(net.parameters(), o.max_grad_norm, foreach=True)
        self.optimizer.step()
        return stats

    @staticmethod
    def _diagnostics(
        heads: tuple[str, ...],
        epochs: list[list[torch.Tensor]],
        stop: bool,
        b_values: torch.Tensor,
        b_returns: torch.Tensor,
        lr: float,
        ent_coef: float,
    ) -> dict[str, float]:
        diagnostics = {
            "explained_variance": explained_variance(b_values, b_returns),
            "epochs_run": float(len(epochs)),
            "minibatches_run": float(sum(len(e) for e in epochs)),
            "kl_stopped": float(stop),
            "learning_rate": lr,
            "ent_coef": ent_coef,
        }
        if epochs:
            epoch_sums = [torch.stack(e).sum(0) for e in epochs]
            total = torch.stack(epoch_sums).sum(0)
            pg, v, ent, kl, _, n_clip, n_ratios = total[:N_SCALARS].tolist()
            entropy_per_head = total[N_SCALARS : N_SCALARS + len(heads)].tolist()
            head_used = total[N_SCALARS + len(heads) :]
            n_mb = diagnostics["minibatches_run"]
            diagnostics.update(
                {
                    "policy_loss": pg / n_mb,
                    "value_loss": v / n_mb,
                    "entropy": ent / n_mb,
                    "approx_kl": kl / n_mb,
                    "clip_fraction": n_clip / max(n_ratios, 1.0),
                }
            )
            for head, summed, count in zip(
                heads, entropy_per_head, head_used.tolist(), strict=True
            ):
                diagnostics[f"entropy/{head}"] = summed / count if count else 0.0
            for k, e in enumerate(epoch_sums, start=1):
                *_, deviation_sum, clipped_sum, ratios = e[:N_SCALARS].tolist()
                n = max(ratios, 1.0)
                diagnostics[f"ratio_deviation/epoch{k}"] = deviation_sum / n
                diagnostics[f"clip_fraction/epoch{k}"] = clipped_sum / n
        return diagnostics
