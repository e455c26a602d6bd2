"""One PPO update, top to bottom, as in CleanRL's ``ppo.py``.

Read :meth:`PPOLearner.update`, then the functions below it in the order it calls them:

1. the schedules: this update's learning rate and entropy coefficient;
2. :func:`compute_gae`: advantages and returns over each env's segments, with the run's γ
   (with ``advantage_groups = "pair"``, the advantages then normalised within each pair;
   with ``"seed"``, :func:`relative_to_seed_group` replaces them);
3. the rollout flattened into chunks (:func:`~esper_tamiyo_ppo.minibatches.flatten_rollout`);
4. K epochs, each a random pass over the chunks in minibatches (:meth:`PPOLearner._minibatch`):
   the loss (:func:`ppo_loss`: evaluate the stored actions under the stored masks,
   normalise the advantages, ratio, clipped surrogate of every head the op used summed
   over those heads, clipped value loss, entropy bonus); stop the whole update once the
   approximate KL exceeds ``kl_stop_factor x target_kl`` (checked before that
   minibatch's step); else backpropagate, clip the global gradient norm, step Adam;
5. the statistics out (:func:`~esper_tamiyo_ppo.update_stats.summarise`).

The rollout comes in already scaled: ``PPOPolicy.update`` bootstraps the last values and
normalises the rewards, then calls this update, then updates the observation normaliser.

Data parallelism (``shard`` = (rank, world), set with ``gradient_sync`` by the
distributed executor): every rank holds the whole rollout and draws the same minibatches,
but runs the forward and backward pass of its own slice of each minibatch only. Each
rank's loss is its slice's share of the minibatch mean (times ``world``), so the
all-reduced mean of the gradients is the whole minibatch's gradient; the minibatch's
statistics (approximate KL included) are reduced in the same all-reduce, so every rank
takes the same early-stop decision and ends the update with identical parameters.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import nn

from esper_tamiyo_ppo.buffer import RolloutBuffer
from esper_tamiyo_ppo.distributions import head_names, run_heads, used_heads_table
from esper_tamiyo_ppo.minibatches import FlatRollout, Share, flatten_rollout, weighted_mean
from esper_tamiyo_ppo.network import PolicyNetwork
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.update_stats import N_SCALARS, SCALAR_STATS, minibatch_stats, summarise

GradientSync = Callable[[list[torch.Tensor]], None]
ADV_EPS = 1e-8
# Returns of one seed group closer than this (in the normaliser's units) are equal: the
# envs acted alike, and dividing float noise by its own std would make it a signal.
GROUP_TOLERANCE = 1e-6


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

    def update(
        self,
        rollout: RolloutBuffer,
        rewards: torch.Tensor,
        last_values: torch.Tensor,
        update_index: int,
    ) -> dict[str, float]:
        """One PPO update on a full ``rollout``; ``rewards [n_envs, T]`` are its (scaled)
        rewards and ``last_values [n_envs]`` V of the observation after its last step."""
        o = self.options
        started = time.perf_counter()

        # ---- 1. Schedules.
        lr = self.learning_rate(update_index)
        ent_coef = self.entropy_coef(update_index)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        # ---- 2. Advantages and returns.
        advantages, returns = compute_gae(
            rewards, rollout.values, rollout.terminals, last_values, self.gamma, o.gae_lambda
        )
        if o.advantage_groups == "pair":
            advantages = normalize_within_groups(advantages, rollout.groups)
        elif o.advantage_groups == "seed":
            advantages = relative_to_seed_group(
                rewards, rollout.terminals, rollout.groups, self.gamma
            )

        # ---- 3. The rollout flattened, in chunks: single steps for the MLP, sequences for
        # the LSTM (the whole rollout, or lstm_chunk_length steps).
        n_steps = rollout.n_steps
        if self.net.lstm is None:
            length = 1
        else:
            length = o.lstm_chunk_length if 0 < o.lstm_chunk_length < n_steps else n_steps
        batch = flatten_rollout(rollout, advantages, returns, length)
        n_chunks = batch.positions.shape[1]

        # ---- 4. K epochs of minibatches, until the approximate KL says stop.
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

        # ---- 5. Statistics: means over the minibatches run, per head and per epoch.
        diagnostics = summarise(self.heads, epochs, stop, batch.values, batch.returns, lr, ent_coef)
        diagnostics["update_time"] = time.perf_counter() - started
        if o.advantage_groups == "seed":
            # How much the groups had to compare: the share of steps whose env's return
            # differed from its group's (0: every group acted alike, nothing learned).
            diagnostics["seed_groups/apart"] = float((advantages != 0).float().mean())
        return diagnostics

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


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminals: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation: advantages and returns of a rollout, all
    ``[n_envs, T]``.

    ``terminals[:, t]`` says step t ended its segment (episode end or governor
    rollback): nothing is bootstrapped across it. ``last_values [n_envs]`` is V of the
    observation after the last step, used only where that step was not terminal.
    """
    n_steps = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_values)
    for t in reversed(range(n_steps)):
        next_value = last_values if t == n_steps - 1 else values[:, t + 1]
        not_terminal = 1.0 - terminals[:, t].to(rewards.dtype)
        delta = rewards[:, t] + gamma * next_value * not_terminal - values[:, t]
        running = delta + gamma * gae_lambda * not_terminal * running
        advantages[:, t] = running
    return advantages, advantages + values


def normalize_within_groups(advantages: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Each group's advantages to mean 0 and std 1 (population std) over the rollout. The
    returns stay as GAE gave them: only the policy's step sizes are rescaled per pair."""
    out = advantages.clone()
    for group in groups.unique():
        member = groups == group
        std, mean = torch.std_mean(advantages[member], correction=0)
        out[member] = (advantages[member] - mean) / (std + ADV_EPS)
    return out


def relative_to_seed_group(
    rewards: torch.Tensor, terminals: torch.Tensor, groups: torch.Tensor, gamma: float
) -> torch.Tensor:
    """GRPO's group-relative advantage on a shared seed: each step's discounted return to
    go (within its segment) minus the mean over the steps of the same column whose env
    ran the same episode (``groups``: the episode seed), over their population std.

    The envs of a group share host, data order and pair, so whatever their returns share
    (a lucky seed, an easy pair) cancels: two envs that acted alike get 0, and where one
    grew and another did not, the difference is what growing changed. All ``[n_envs, T]``."""
    n_steps = rewards.shape[1]
    to_go = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(n_steps)):
        running = rewards[:, t] + gamma * running * (1.0 - terminals[:, t].to(rewards.dtype))
        to_go[:, t] = running
    out = torch.zeros_like(rewards)
    for t in range(n_steps):
        column, keys = to_go[:, t], groups[:, t]
        for key in keys.unique():
            member = keys == key
            std, mean = torch.std_mean(column[member], correction=0)
            if std > GROUP_TOLERANCE:  # else the group acted alike: nothing to credit
                out[member, t] = (column[member] - mean) / std
    return out


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
    """The PPO loss of the chunks ``part`` of ``b`` (this rank's slice of a minibatch whose
    positions are ``whole_i``) and their packed statistics."""
    mb_positions = b.positions[:, part]
    i = mb_positions.flatten()
    weight = None if b.padding is None else b.padding[:, part].flatten().to(b.values.dtype)

    # Evaluate: the trunk features of the stored (normalised) observations; the LSTM
    # replays each chunk from the state stored at its first step.
    if net.lstm is None:
        features = net.encode(b.obs[i])
    else:
        shape = mb_positions.shape
        state = (b.state_h[mb_positions[0]], b.state_c[mb_positions[0]])
        obs, starts = b.obs[i].view(*shape, -1), b.starts[i].view(shape)
        features = net.unroll(obs, starts, state).flatten(0, 1)
    # Advantage normalisation over the whole minibatch (every rank holds the rollout),
    # not just this slice, with the population std.
    mb_advantages = b.advantages[i]
    if o.normalize_advantages:
        whole = b.advantages[whole_i]
        if whole_weight is None:
            std, mean = torch.std_mean(whole, correction=0)
        else:
            mean = weighted_mean(whole, whole_weight)
            std = weighted_mean((whole - mean) ** 2, whole_weight).sqrt()
        mb_advantages = (mb_advantages - mean) / (std + ADV_EPS)
    # ... and the stored actions under the stored masks.
    out = run_heads(
        net,
        features,
        b.masks.map(lambda m, i=i: m[i]),
        actions=b.actions[i],
        used_table=used_table,
    )

    # Ratio and clipped surrogate.
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

    # Approximate KL of the joint ratio (CleanRL's (ratio - 1) - log ratio): the early stop.
    with torch.no_grad():
        joint = log_ratio.sum(1)
        approx_kl = share.mean((joint.exp() - 1.0) - joint, weight)
    stats = minibatch_stats(
        o.clip_coef,
        share,
        weight,
        (pg_loss, v_loss, entropy, approx_kl),
        ratio,
        clipped_over,
        used,
        out.entropies,
    )
    return loss, stats
