"""The two normalisers of the learner.

- Observations: a running mean/std (Welford, :class:`esper_core.env.observation.RunningMeanStd`)
  that is FROZEN while a rollout is collected and updated between rollouts with the raw
  features of that rollout, so every stored observation was normalised with the same
  statistics the policy acted with.
- Rewards: divided by the running std of the discounted return (no mean shift, which
  would change the optimal policy), then clipped.
"""

from __future__ import annotations

from typing import Any

import torch

from esper_core.env.observation import RunningMeanStd
from esper_tamiyo_ppo.slot_layout import SlotLayout

VAR_EPS = 1e-8


class ObservationNormalizer:
    def __init__(self, dim: int, clip: float, enabled: bool = True) -> None:
        self.enabled = enabled
        self.rms = RunningMeanStd((dim,), clip=clip)

    def normalize(self, raw: torch.Tensor) -> torch.Tensor:
        return self.rms.normalize(raw) if self.enabled else raw

    def update(self, raw: torch.Tensor) -> None:
        if self.enabled:
            self.rms.update(raw)

    def state_dict(self) -> dict[str, Any]:
        return self.rms.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_state_dict(state)


class SlotObservationNormalizer:
    """The observation normaliser of the ``slots`` network: one running mean/std for the
    run-level features, one shared by every slot's row and one shared by every
    (slot, blueprint) candidate's row, so its statistics, like the network's weights,
    fit any number of slots and blueprints. Same interface as
    :class:`ObservationNormalizer`, on the flat vector of :class:`SlotLayout`.

    With presence flags (schema 2) padding is neither a sample nor a reading: the
    statistics are updated with present rows only, the flag passes unnormalised (the
    network pools by it), and absent rows stay all zero."""

    def __init__(self, layout: SlotLayout, clip: float, enabled: bool = True) -> None:
        self.layout = layout
        self.enabled = enabled
        self.parts = (
            RunningMeanStd((layout.global_dim,), clip=clip),
            RunningMeanStd((layout.slot_dim,), clip=clip),
            RunningMeanStd((layout.candidate_dim,), clip=clip),
        )

    def normalize(self, raw: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return raw
        parts = self.layout.split(raw)
        out = [rms.normalize(x) for rms, x in zip(self.parts, parts)]
        if self.layout.has_presence:
            out[1:] = [_keep_presence(n, x) for n, x in zip(out[1:], parts[1:])]
        return self.layout.join(*out)

    def update(self, raw: torch.Tensor) -> None:
        if not self.enabled:
            return
        for i, (rms, x) in enumerate(zip(self.parts, self.layout.split(raw))):
            if i and self.layout.has_presence:
                rows = x.reshape(-1, x.shape[-1])
                x = rows[rows[:, -1] > 0.5]
            rms.update(x)  # every (present) slot or candidate row is one sample of its part

    def state_dict(self) -> dict[str, Any]:
        return {name: rms.state_dict() for name, rms in zip(PART_NAMES, self.parts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, rms in zip(PART_NAMES, self.parts):
            rms.load_state_dict(state[name])


PART_NAMES = ("global", "slot", "candidate")


def _keep_presence(normalized: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
    """Rows normalised where present (their flag kept as 1), all zero where absent."""
    flag = raw[..., -1:]
    return torch.cat([normalized[..., :-1] * flag, flag], dim=-1)


class RewardNormalizer:
    """Std-only reward scaling: ``r / std(discounted return)``, clipped to ``±clip``.

    The discounted return is accumulated per env with the run's γ and restarts after a
    terminal step; it carries over between rollouts for segments still open.
    """

    def __init__(self, n_envs: int, gamma: float, clip: float, enabled: bool = True) -> None:
        self.enabled = enabled
        self.gamma = gamma
        self.clip = clip
        self.rms = RunningMeanStd(())
        self.returns = torch.zeros(n_envs, dtype=torch.float64)

    def normalize_rollout(self, rewards: torch.Tensor, terminals: torch.Tensor) -> torch.Tensor:
        """Update the statistics with this rollout's returns and scale its rewards ``[n_envs, T]``."""
        if not self.enabled:
            return rewards
        seen = []
        for t in range(rewards.shape[1]):
            self.returns = self.returns * self.gamma + rewards[:, t].to(torch.float64)
            seen.append(self.returns)
            self.returns = torch.where(terminals[:, t], 0.0, self.returns)
        self.rms.update(torch.stack(seen))
        return (rewards / self.std).clamp(-self.clip, self.clip)

    @property
    def std(self) -> float:
        return float(torch.sqrt(self.rms.var + VAR_EPS))

    def state_dict(self) -> dict[str, Any]:
        return {"rms": self.rms.state_dict(), "returns": self.returns.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_state_dict(state["rms"])
        self.returns = state["returns"].clone()
