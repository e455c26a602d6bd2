"""The rollout buffer: preallocated ``[n_envs, T, ...]`` tensors, one row per env.

It stores exactly the NORMALISED observations the policy acted on (plus the raw ones,
which only feed the normaliser update after the rollout), the masks that were in force,
and, for the LSTM, the recurrent state each step started from. Each env's row is cut
into segments by ``terminals``: a terminal step (episode end or governor rollback) is
not bootstrapped across, and the next step of that env is flagged in ``starts``, where
the LSTM state is zero. A rollback in one env never touches the other rows.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch

from esper_tamiyo_ppo.distributions import BatchMasks
from esper_tamiyo_ppo.network import GROWTH_CHOICES

if TYPE_CHECKING:
    from esper_core.step_values import Observation


@attrs.define(eq=False)
class RolloutBuffer:
    """Every tensor is ``[n_envs, T, ...]``; build one with :meth:`allocate`."""

    obs: torch.Tensor  # [.., D] normalised: what the policy saw
    raw_obs: torch.Tensor  # [.., D] for the observation normaliser only
    actions: torch.Tensor  # [.., n_heads] long
    log_probs: torch.Tensor  # [.., n_heads] per head, 0 in heads the op ignores
    values: torch.Tensor
    rewards: torch.Tensor
    terminals: torch.Tensor  # bool: the step ended its segment
    starts: torch.Tensor  # bool: the step began a segment (zero LSTM state)
    state_h: torch.Tensor  # [.., hidden] LSTM state before the step (empty for the MLP)
    state_c: torch.Tensor
    mask_op: torch.Tensor  # the BatchMasks in force, one tensor per field
    mask_slot: torch.Tensor
    mask_blueprint: torch.Tensor
    mask_style: torch.Tensor
    mask_tempo: torch.Tensor
    mask_alpha_target: torch.Tensor
    mask_host_growth: torch.Tensor  # [.., 2] with a host-growth head, [.., 0] without
    groups: torch.Tensor  # long: the step's group (its pair's, see pair_group); 0 alone
    step: int = 0  # the time index being filled
    acted: bool = False  # actions of ``step`` recorded, outcome not yet

    @classmethod
    def allocate(
        cls,
        n_envs: int,
        n_steps: int,
        feature_dim: int,
        head_sizes: dict[str, int],
        state_size: int,
        device: torch.device | str = "cpu",
        host_growth: bool = False,
    ) -> RolloutBuffer:
        s = head_sizes
        n_heads = len(s) + int(host_growth)  # the growth head's column comes last

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(n_envs, n_steps, *shape, dtype=dtype, device=device)

        return cls(
            obs=zeros(feature_dim),
            raw_obs=zeros(feature_dim),
            actions=zeros(n_heads, dtype=torch.long),
            log_probs=zeros(n_heads),
            values=zeros(),
            rewards=zeros(),
            terminals=zeros(dtype=torch.bool),
            starts=zeros(dtype=torch.bool),
            state_h=zeros(state_size),
            state_c=zeros(state_size),
            mask_op=zeros(s["op"], dtype=torch.bool),
            mask_slot=zeros(s["op"], s["slot"], dtype=torch.bool),
            mask_blueprint=zeros(s["slot"], s["blueprint"], dtype=torch.bool),
            mask_style=zeros(s["style"], dtype=torch.bool),
            mask_tempo=zeros(s["tempo"], dtype=torch.bool),
            mask_alpha_target=zeros(s["slot"], s["alpha_target"], dtype=torch.bool),
            mask_host_growth=zeros(GROWTH_CHOICES if host_growth else 0, dtype=torch.bool),
            groups=zeros(dtype=torch.long),
        )

    @property
    def n_envs(self) -> int:
        return self.values.shape[0]

    @property
    def n_steps(self) -> int:
        return self.values.shape[1]

    @property
    def full(self) -> bool:
        return self.step == self.n_steps

    def clear(self) -> None:
        self.step = 0
        self.acted = False

    def masks(self) -> BatchMasks:
        """The stored masks (views of the buffer, not copies)."""
        return BatchMasks(
            op=self.mask_op,
            slot=self.mask_slot,
            blueprint=self.mask_blueprint,
            style=self.mask_style,
            tempo=self.mask_tempo,
            alpha_target=self.mask_alpha_target,
            host_growth=self.mask_host_growth if self.mask_host_growth.shape[-1] else None,
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor field by name (the checkpoint layout)."""
        fields = attrs.asdict(self, recurse=False)
        return {name: value for name, value in fields.items() if isinstance(value, torch.Tensor)}

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
        groups: torch.Tensor | None = None,
    ) -> None:
        """Record what the envs ``rows`` saw and did at the current step (``groups``: each
        row's group, see :func:`pair_group`; all one group without it)."""
        if self.full:
            raise RuntimeError(
                f"the rollout buffer holds {self.n_steps} steps and is full; call update() before acting again"
            )
        if self.acted:
            raise RuntimeError("act() was called twice without observe() in between")
        t = self.step

        def put(stored: torch.Tensor, value: torch.Tensor) -> None:
            stored[rows, t] = value.to(stored.dtype)

        put(self.obs, obs)
        put(self.raw_obs, raw_obs)
        put(self.actions, actions)
        put(self.log_probs, log_probs)
        put(self.values, values)
        put(self.starts, starts)
        put(self.state_h, state[0])
        put(self.state_c, state[1])
        put(self.groups, torch.zeros_like(rows) if groups is None else groups)
        for stored, mask in zip(self.masks(), masks, strict=True):
            if (stored is None) != (mask is None):
                raise ValueError("host-growth masks are given exactly when the buffer has the head")
            if stored is not None and mask is not None:
                put(stored, mask)
        self.acted = True

    def add_outcomes(
        self, rows: torch.Tensor, rewards: torch.Tensor, terminals: torch.Tensor
    ) -> None:
        """Record the rewards and terminal flags of the current step, then move on."""
        if not self.acted:
            raise RuntimeError("observe() was called without act() before it")
        self.rewards[rows, self.step] = rewards.to(torch.float32)
        self.terminals[rows, self.step] = terminals
        self.step += 1
        self.acted = False

    def state_dict(self) -> dict[str, Any]:
        return {
            "tensors": {k: v.clone() for k, v in self.tensors().items()},
            "step": self.step,
            "acted": self.acted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ours = self.tensors()
        self.groups.zero_()  # a checkpoint from before groups were stored: one group
        for key, value in state["tensors"].items():
            if key not in ours or ours[key].shape != value.shape:
                raise ValueError(
                    f"rollout buffer field {key!r} has shape {tuple(value.shape)}, expected "
                    f"{tuple(ours[key].shape) if key in ours else 'no such field'}"
                )
            ours[key].copy_(value)
        self.step = int(state["step"])
        self.acted = bool(state["acted"])


def pair_group(label: str) -> int:
    """The group of a step of pair ``label`` (``Observation.pair``): the same number in
    every process and after a resume, with no table to keep; "" (no mixed run) is 0."""
    return zlib.crc32(label.encode()) if label else 0


def step_groups(
    observations: Sequence[Observation], advantage_groups: str, device: torch.device
) -> torch.Tensor:
    """The group each step is compared within (``policies.ppo.advantage_groups``): the
    env's episode seed for ``seed`` (envs that share it ran the same episode), else its
    pair."""
    keys = [o.seed if advantage_groups == "seed" else pair_group(o.pair) for o in observations]
    return torch.tensor(keys, dtype=torch.long, device=device)
