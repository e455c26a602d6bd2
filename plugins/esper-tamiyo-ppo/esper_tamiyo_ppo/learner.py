"""The PPO update: K epochs over minibatches of a finished rollout (CleanRL-style).

Per minibatch: evaluate the stored actions under the stored masks, normalise the
advantages, take the clipped surrogate of every head the op used (summed over those
heads), the clipped value loss and the entropy bonus, backpropagate, let the optional
``gradient_sync`` hook combine gradients across processes, clip the global gradient norm
and step Adam. The update stops early once the approximate KL of a minibatch exceeds
``kl_stop_factor x target_kl`` (checked before that minibatch's step).

Minibatches are built from *chunks* of consecutive steps of one env: single steps for the
MLP, sequences (the whole rollout by default, or ``lstm_chunk_length``) for the LSTM,
which replays each chunk from the state stored at its first step and resets the state
at segment starts. A shorter last chunk is padded; padding has weight 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
from torch import nn

from esper_core.lifecycle.actions import HEADS
from esper_tamiyo_ppo.distributions import BatchMasks, run_heads, used_heads_table
from esper_tamiyo_ppo.network import ActorCritic
from esper_tamiyo_ppo.options import PPOOptions

GradientSync = Callable[[list[torch.Tensor]], None]
ADV_EPS = 1e-8


class RolloutBatch(NamedTuple):
    """A finished rollout with its advantages; every tensor is ``[n_envs, T, ...]``."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    starts: torch.Tensor
    state_h: torch.Tensor
    state_c: torch.Tensor
    masks: BatchMasks


class Minibatch(NamedTuple):
    """Chunks of steps laid out ``[L, C]`` (time, chunk) as indices into the rollout
    flattened to ``[n_envs * T]``; ``valid`` is None when nothing is padded."""

    positions: torch.Tensor  # [L, C]
    valid: torch.Tensor | None  # [L, C] bool


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


class LossStats(NamedTuple):
    """Detached statistics of one minibatch (sums over its entries where noted)."""

    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    ratio_deviation: torch.Tensor  # sum of |ratio - 1| over the heads used
    n_clipped: torch.Tensor  # head entries with |ratio - 1| > clip
    head_entropy: torch.Tensor  # [n_heads] entropy summed where the head was used
    head_used: torch.Tensor  # [n_heads] entries where the head was used

    def packed(self) -> torch.Tensor:
        return torch.cat([torch.stack(self[:6]), self.head_entropy, self.head_used])

    @classmethod
    def unpack(cls, packed: torch.Tensor) -> LossStats:
        n = len(HEADS)
        pg, v, ent, kl, dev, clipped = packed[:6]
        return cls(pg, v, ent, kl, dev, clipped, packed[6 : 6 + n], packed[6 + n :])


def flatten_rollout(batch: RolloutBatch) -> RolloutBatch:
    """Every ``[n_envs, T, ...]`` tensor as ``[n_envs * T, ...]`` (views, no copies)."""
    return RolloutBatch(
        **{f: getattr(batch, f).flatten(0, 1) for f in RolloutBatch._fields if f != "masks"},
        masks=batch.masks.map(lambda m: m.flatten(0, 1)),
    )


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var() / var)


def _mean(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if weight is None else (x * weight).sum() / weight.sum()


class PPOLearner:
    """Owns the optimiser and the schedules; :meth:`update` runs one PPO update."""

    def __init__(
        self,
        net: ActorCritic,
        options: PPOOptions,
        total_updates: int,
        generator: torch.Generator,
    ) -> None:
        self.net = net
        self.options = options
        self.total_updates = total_updates
        self.generator = generator
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
        self._used_table = used_heads_table(net.value_head.weight.device)
        self._layout: tuple[tuple[int, int, int], torch.Tensor, torch.Tensor | None] | None = None

    # ------------------------------------------------------------ schedules

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

    # ------------------------------------------------------------ minibatches

    def minibatches(self, n_envs: int, n_steps: int) -> Iterator[Minibatch]:
        """One pass over the rollout in random order (the policy's generator)."""
        o = self.options
        if self.net.lstm is None:
            length = 1
        else:
            length = o.lstm_chunk_length if 0 < o.lstm_chunk_length < n_steps else n_steps
        key = (n_envs, n_steps, length)
        if self._layout is None or self._layout[0] != key:  # the same for every pass
            envs, times, in_range = chunk_layout(n_envs, n_steps, length)
            padding = None if bool(in_range.all()) else in_range
            self._layout = (key, envs * n_steps + times, padding)
        _, positions, valid = self._layout
        n_chunks = positions.shape[1]
        order = torch.randperm(n_chunks, generator=self.generator)
        for part in torch.tensor_split(order, min(o.num_minibatches, n_chunks)):
            yield Minibatch(positions[:, part], None if valid is None else valid[:, part])

    # ------------------------------------------------------------ the update

    def update(self, batch: RolloutBatch, update_index: int) -> dict[str, float]:
        o = self.options
        started = time.perf_counter()
        lr = self.learning_rate(update_index)
        ent_coef = self.entropy_coef(update_index)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n_envs, n_steps = batch.values.shape
        flat = flatten_rollout(batch)
        kl_limit = o.kl_stop_factor * o.target_kl if o.target_kl > 0 else math.inf

        epochs: list[list[torch.Tensor]] = []  # per epoch, per minibatch: LossStats.packed()
        stop = False
        for _epoch in range(o.update_epochs):
            done: list[torch.Tensor] = []
            for mb in self.minibatches(n_envs, n_steps):
                loss, stats = self._loss(flat, mb, ent_coef)
                if float(stats.approx_kl) > kl_limit:
                    stop = True
                    break
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if self.gradient_sync is not None:
                    self.gradient_sync(
                        [p.grad for p in self.net.parameters() if p.grad is not None]
                    )
                nn.utils.clip_grad_norm_(self.net.parameters(), o.max_grad_norm, foreach=True)
                self.optimizer.step()
                done.append(stats.packed())
            if done:
                epochs.append(done)
            if stop:
                break

        diagnostics = {
            "explained_variance": explained_variance(flat.values, flat.returns),
            "epochs_run": float(len(epochs)),
            "minibatches_run": float(sum(len(e) for e in epochs)),
            "kl_stopped": float(stop),
            "learning_rate": lr,
            "ent_coef": ent_coef,
        }
        if epochs:
            epoch_sums = [torch.stack(e).sum(0) for e in epochs]
            per_epoch = [LossStats.unpack(e) for e in epoch_sums]
            total = LossStats.unpack(torch.stack(epoch_sums).sum(0))
            n_mb = diagnostics["minibatches_run"]
            entries = max(float(total.head_used.sum()), 1.0)
            diagnostics.update(
                {
                    "policy_loss": float(total.pg_loss) / n_mb,
                    "value_loss": float(total.v_loss) / n_mb,
                    "entropy": float(total.entropy) / n_mb,
                    "approx_kl": float(total.approx_kl) / n_mb,
                    "clip_fraction": float(total.n_clipped) / entries,
                }
            )
            for i, head in enumerate(HEADS):
                count = float(total.head_used[i])
                diagnostics[f"entropy/{head}"] = (
                    float(total.head_entropy[i]) / count if count else 0.0
                )
            for k, e in enumerate(per_epoch, start=1):
                n = max(float(e.head_used.sum()), 1.0)
                diagnostics[f"ratio_deviation/epoch{k}"] = float(e.ratio_deviation) / n
                diagnostics[f"clip_fraction/epoch{k}"] = float(e.n_clipped) / n
        diagnostics["update_time"] = time.perf_counter() - started
        return diagnostics

    def _loss(
        self, batch: RolloutBatch, mb: Minibatch, ent_coef: float
    ) -> tuple[torch.Tensor, LossStats]:
        """The PPO loss of one minibatch of the flattened rollout ``batch``, and its
        (detached) statistics."""
        o = self.options
        i = mb.positions.flatten()  # time-major, so the LSTM output lines up with it
        weight = mb.valid.flatten().to(batch.values.dtype) if mb.valid is not None else None
        if self.net.lstm is None:
            features = self.net.encoder(batch.obs[i])
        else:
            shape = mb.positions.shape
            state = (batch.state_h[mb.positions[0]], batch.state_c[mb.positions[0]])
            obs, starts = batch.obs[i].view(*shape, -1), batch.starts[i].view(shape)
            features = self.net.unroll(obs, starts, state).flatten(0, 1)
        advantages = batch.advantages[i]
        if o.normalize_advantages:
            if weight is None:
                std, mean = torch.std_mean(advantages, correction=0)
            else:
                mean = _mean(advantages, weight)
                std = _mean((advantages - mean) ** 2, weight).sqrt()
            advantages = (advantages - mean) / (std + ADV_EPS)

        out = run_heads(
            self.net,
            features,
            batch.masks.map(lambda m: m[i]),
            actions=batch.actions[i],
            used_table=self._used_table,
        )
        used = out.used.to(features.dtype)
        log_ratio = out.log_probs - batch.log_probs[i]  # 0 in the heads the op ignores
        ratio = log_ratio.exp()
        neg_adv = -advantages.unsqueeze(1)
        surrogate = torch.max(
            neg_adv * ratio, neg_adv * ratio.clamp(1.0 - o.clip_coef, 1.0 + o.clip_coef)
        )
        pg_loss = _mean((surrogate * used).sum(1), weight)

        new_values = self.net.value(features)
        old_values, returns = batch.values[i], batch.returns[i]
        v_loss = (new_values - returns) ** 2
        if o.clip_value_loss:
            clipped = old_values + (new_values - old_values).clamp(-o.clip_coef, o.clip_coef)
            v_loss = torch.max(v_loss, (clipped - returns) ** 2)
        v_loss = 0.5 * _mean(v_loss, weight)
        entropy = _mean(out.entropies.sum(1), weight)
        loss = pg_loss - ent_coef * entropy + o.vf_coef * v_loss

        with torch.no_grad():
            joint = log_ratio.sum(1)
            deviation = (ratio - 1.0).abs()  # 0 in unused heads, where the ratio is exactly 1
            head_entropy = out.entropies
            if weight is not None:
                used = used * weight.unsqueeze(1)
                deviation = deviation * weight.unsqueeze(1)
                head_entropy = head_entropy * weight.unsqueeze(1)
            stats = LossStats(
                pg_loss=pg_loss.detach(),
                v_loss=v_loss.detach(),
                entropy=entropy.detach(),
                approx_kl=_mean((joint.exp() - 1.0) - joint, weight),
                ratio_deviation=deviation.sum(),
                n_clipped=(deviation > o.clip_coef).sum(dtype=deviation.dtype),
                head_entropy=head_entropy.sum(0),
                head_used=used.sum(0),
            )
        return loss, stats
