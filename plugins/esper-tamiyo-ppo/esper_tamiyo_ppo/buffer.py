"""The rollout buffer: preallocated ``[n_envs, T]`` tensors, one row per env.

It stores exactly the NORMALISED observations the policy acted on (plus the raw ones,
which only feed the normaliser update after the rollout), the masks that were in force,
and, for the LSTM, the recurrent state each step started from. Each env's row is cut
into segments by ``terminals``: a terminal step (episode end or governor rollback) is
not bootstrapped across, and the next step of that env is flagged in ``starts``, where
the LSTM state is zero. A rollback in one env never touches the other rows.
"""

from __future__ import annotations

from typing import Any

import torch

from esper_tamiyo_ppo.distributions import BatchMasks

MASK_FIELDS = tuple(f"mask_{name}" for name in BatchMasks._fields)


class RolloutBuffer:
    def __init__(
        self,
        n_envs: int,
        n_steps: int,
        feature_dim: int,
        head_sizes: dict[str, int],
        state_size: int,
        device: torch.device | str = "cpu",
    ) -> None:
        self.n_envs, self.n_steps = n_envs, n_steps
        n, t = n_envs, n_steps
        s = head_sizes

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(n, t, *shape, dtype=dtype, device=device)

        self.tensors: dict[str, torch.Tensor] = {
            "obs": zeros(feature_dim),  # normalised: what the policy saw
            "raw_obs": zeros(feature_dim),  # for the observation normaliser only
            "actions": zeros(len(s), dtype=torch.long),
            "log_probs": zeros(len(s)),  # per head, 0 in heads the op ignores
            "values": zeros(),
            "rewards": zeros(),
            "terminals": zeros(dtype=torch.bool),
            "starts": zeros(dtype=torch.bool),
            "state_h": zeros(state_size),  # LSTM state before the step (empty for the MLP)
            "state_c": zeros(state_size),
            "mask_op": zeros(s["op"], dtype=torch.bool),
            "mask_slot": zeros(s["op"], s["slot"], dtype=torch.bool),
            "mask_blueprint": zeros(s["blueprint"], dtype=torch.bool),
            "mask_style": zeros(s["style"], dtype=torch.bool),
            "mask_tempo": zeros(s["tempo"], dtype=torch.bool),
            "mask_alpha_target": zeros(s["slot"], s["alpha_target"], dtype=torch.bool),
        }
        self.step = 0  # the time index being filled
        self.acted = False  # actions of ``step`` recorded, outcome not yet

    def __getattr__(self, name: str) -> torch.Tensor:
        tensors = self.__dict__.get("tensors", {})
        if name in tensors:
            return tensors[name]
        raise AttributeError(name)

    @property
    def full(self) -> bool:
        return self.step == self.n_steps

    def clear(self) -> None:
        self.step = 0
        self.acted = False

    def masks(self) -> BatchMasks:
        return BatchMasks(*(self.tensors[f] for f in MASK_FIELDS))

    def add_actions(
        self,
        rows: torch.Tensor,
        *,
        obs: torch.Tensor,
        raw_obs: torch.Tensor,
        actions: torch.Tensor,
        log_probs: torch.Tensor,
        values: torch.Tensor,
        masks: BatchMasks,
        starts: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        """Record what the envs ``rows`` saw and did at the current step."""
        if self.full:
            raise RuntimeError(
                f"the rollout buffer holds {self.n_steps} steps and is full; call update() before acting again"
            )
        if self.acted:
            raise RuntimeError("act() was called twice without observe() in between")
        t = self.step
        values_by_field = {
            "obs": obs,
            "raw_obs": raw_obs,
            "actions": actions,
            "log_probs": log_probs,
            "values": values,
            "starts": starts,
            "state_h": state[0],
            "state_c": state[1],
            **{field: mask for field, mask in zip(MASK_FIELDS, masks)},
        }
        for field, value in values_by_field.items():
            self.tensors[field][rows, t] = value.to(self.tensors[field].dtype)
        self.acted = True

    def add_outcomes(
        self, rows: torch.Tensor, rewards: torch.Tensor, terminals: torch.Tensor
    ) -> None:
        """Record the rewards and terminal flags of the current step, then move on."""
        if not self.acted:
            raise RuntimeError("observe() was called without act() before it")
        self.tensors["rewards"][rows, self.step] = rewards.to(torch.float32)
        self.tensors["terminals"][rows, self.step] = terminals
        self.step += 1
        self.acted = False

    def state_dict(self) -> dict[str, Any]:
        return {
            "tensors": {k: v.clone() for k, v in self.tensors.items()},
            "step": self.step,
            "acted": self.acted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state["tensors"].items():
            if key not in self.tensors or self.tensors[key].shape != value.shape:
                raise ValueError(
                    f"rollout buffer field {key!r} has shape {tuple(value.shape)}, expected "
                    f"{tuple(self.tensors[key].shape) if key in self.tensors else 'no such field'}"
                )
            self.tensors[key].copy_(value)
        self.step = int(state["step"])
        self.acted = bool(state["acted"])
