"""Generalised advantage estimation over per-env segments."""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminals: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of a rollout, all ``[n_envs, T]``.

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
