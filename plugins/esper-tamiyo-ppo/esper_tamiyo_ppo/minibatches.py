"""How the update cuts a rollout into minibatches, and how ranks share one.

The rollout is flattened to ``[n_envs * T, ...]`` (views, no copies) and indexed by
*chunks* of consecutive steps of one env: single steps for the MLP, sequences (the whole
rollout by default, or ``lstm_chunk_length``) for the LSTM, which replays each chunk from
the state stored at its first step. A shorter last chunk is padded; padding has weight 0.

Data parallelism: :class:`Share` turns sums over a rank's slice of a minibatch into that
slice's share of the whole minibatch's mean, scaled by the number of ranks, so the mean
over the ranks (the gradient all-reduce) is the whole minibatch's value. With one rank it
is the plain mean.
"""

from __future__ import annotations

import math

import torch
from attrs import frozen

from esper_tamiyo_ppo.buffer import RolloutBuffer
from esper_tamiyo_ppo.distributions import BatchMasks


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


def flatten_rollout(
    rollout: RolloutBuffer, advantages: torch.Tensor, returns: torch.Tensor, length: int
) -> FlatRollout:
    """The rollout with its advantages and returns, in chunks of ``length`` steps. The
    chunks are laid out ``[L, C]`` (time, chunk): time-major, so the LSTM's output lines
    up with the flattened indices."""
    n_envs, n_steps = rollout.values.shape
    envs, times, in_range = chunk_layout(n_envs, n_steps, length)
    return FlatRollout(
        obs=rollout.obs.flatten(0, 1),
        starts=rollout.starts.flatten(0, 1),
        state_h=rollout.state_h.flatten(0, 1),
        state_c=rollout.state_c.flatten(0, 1),
        actions=rollout.actions.flatten(0, 1),
        log_probs=rollout.log_probs.flatten(0, 1),
        values=rollout.values.flatten(0, 1),
        returns=returns.flatten(0, 1),
        advantages=advantages.flatten(0, 1),
        masks=rollout.masks().map(lambda m: m.flatten(0, 1)),
        positions=envs * n_steps + times,
        padding=None if bool(in_range.all()) else in_range,
    )


def weighted_mean(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if weight is None else (x * weight).sum() / weight.sum()


class Share:
    """Means over a whole minibatch from this rank's slice of it (see the module docstring).

    With one rank it is the plain (weighted) mean."""

    def __init__(self, world: int, total: torch.Tensor | None) -> None:
        self.world = world
        self.total = total  # the minibatch's total weight (sample count); None: one rank

    def mean(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        if self.total is None:
            return weighted_mean(x, weight)
        summed = x.sum() if weight is None else (x * weight).sum()
        return summed * (self.world / self.total)

    def count(self, x: torch.Tensor) -> torch.Tensor:
        """A sum over the slice, scaled so that the mean over the ranks is the whole sum."""
        return x if self.total is None else x * self.world
