"""The environment as a ``gymnasium.Env`` (optional extra ``esper[gym]``).

Actions are a ``MultiDiscrete`` over the heads (op, slot, blueprint, style, tempo,
alpha_target); the legal actions are in ``info["action_mask"]``, one boolean array per
head (the slot mask is the one of the chosen-op-agnostic union; the exact factored
masks are in ``info["masks"]``). An illegal action is refused, never an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from esper_core.config import RunConfig
from esper_core.env.env import MorphogeneticEnv
from esper_core.env.observation import Observation, feature_dim, features
from esper_core.lifecycle.actions import HEADS, Action

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("esper_core.env.gym needs gymnasium: pip install 'esper[gym]'") from exc


def make_env(
    config: RunConfig | None = None, pm: Any = None, env_index: int = 0
) -> MorphogeneticEnv:
    """Build one env from a config through the plugin registries."""
    from esper_core.plugins import PluginManager
    from esper_core.run.resolve import resolve

    config = config or RunConfig()
    resolved = resolve(config, pm or PluginManager())
    cfg = resolved.config
    return MorphogeneticEnv(
        resolved.make_task(),
        resolved.make_reward(),
        resolved.blueprints,
        cfg,
        env_index,
        cfg.run.device,
    )


class EsperGymEnv(gym.Env[np.ndarray, np.ndarray]):
    metadata = {"render_modes": []}

    def __init__(
        self, env: MorphogeneticEnv | None = None, config: RunConfig | None = None, pm: Any = None
    ) -> None:
        super().__init__()
        self.env = env if env is not None else make_env(config, pm)
        space = self.env.space
        self.history_length = self.env.config.env.history_length
        dim = feature_dim(space, self.history_length)
        self.observation_space = spaces.Box(low=-10.0, high=10.0, shape=(dim,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete([space.head_sizes[h] for h in HEADS])
        self._seed = self.env.seed

    def _encode(self, obs: Observation) -> np.ndarray:
        return np.asarray(features(obs, self.env.space, self.history_length), dtype=np.float32)

    def _info(self, obs: Observation, **extra: Any) -> dict[str, Any]:
        m = obs.masks
        mask = (
            m.op.numpy().copy(),
            m.slot.any(dim=0).numpy().copy(),
            m.blueprint.numpy().copy(),
            m.style.numpy().copy(),
            m.tempo.numpy().copy(),
            m.alpha_target.any(dim=0).numpy().copy(),
        )
        return {"action_mask": mask, "masks": m, "observation": obs, **extra}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._seed = seed
        obs = self.env.reset(self._seed)
        return self._encode(obs), self._info(obs)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        result = self.env.step(
            Action.from_indices([int(a) for a in np.asarray(action).reshape(-1)])
        )
        obs = result.observation
        info = self._info(
            obs,
            refused=result.refused,
            rolled_back=result.rolled_back,
            reward_components=result.reward_components,
            test_acc=result.metrics.test_acc,
        )
        # The last epoch is a true terminal state (the epoch fraction is observed and the
        # terminal bonus is paid), so it is `terminated`, not a time-limit truncation.
        return self._encode(obs), float(result.reward), bool(result.done), False, info
