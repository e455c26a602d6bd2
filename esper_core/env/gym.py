"""The environment as a ``gymnasium.Env`` (optional extra ``esper[gym]``), registered as
``esper/Digits-v0`` and friends.

Registration happens when this module is imported; gymnasium also imports it for an id
written ``"esper_core.env.gym:esper/Digits-v0"``::

    import gymnasium
    import esper_core.env.gym  # registers the esper/* ids

    env = gymnasium.make("esper/Digits-v0")

Actions are a ``MultiDiscrete`` over the six heads, in this order: op (WAIT, GERMINATE,
ADVANCE, SET_ALPHA_TARGET, PRUNE, FOSSILIZE), slot, blueprint, style, tempo,
alpha_target. Which heads an op reads: WAIT none; GERMINATE slot, blueprint, style,
tempo; ADVANCE, PRUNE and FOSSILIZE slot; SET_ALPHA_TARGET slot and alpha_target.

Masks. :meth:`EsperGymEnv.action_masks` (what sb3-contrib's ``MaskablePPO`` calls) is one
flat boolean vector: the six heads' masks concatenated in head order, each as long as its
head. The heads are sampled independently, so a per-head mask cannot say "slot r0c1 only
for PRUNE": the slot mask is the union of the slots legal for any op but WAIT, and the
alpha-target mask the union over slots of the targets legal for SET_ALPHA_TARGET. A head
with nothing legal (no slot can take any op) is all True: the op mask then allows only
WAIT, which reads no other head. A sampled combination that the union allows but the
exact rules do not (PRUNE on a slot only GERMINATE fits) is *refused*: the epoch runs as
WAIT and ``info["refused"]`` says why. The exact factored masks are in
``info["masks"]`` (``slot[op]``: the slots legal for that op; ``alpha_target[slot]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from esper_core.config import RunConfig, load_config
from esper_core.config_limits import MAX_SEED
from esper_core.env.env import MorphogeneticEnv
from esper_core.env.observation import Observation, feature_dim, features
from esper_core.lifecycle.actions import HEADS, Action, ActionMasks, LifecycleOp

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("esper_core.env.gym needs gymnasium: pip install 'esper[gym]'") from exc

# The first-party blueprints, pinned so a registered id's action space does not depend on
# which blueprint packages are installed (a "-v0" must mean one space).
CNN_BLUEPRINTS = (
    "cnn/attention",
    "cnn/bottleneck",
    "cnn/conv_heavy",
    "cnn/conv_light",
    "cnn/conv_small",
    "cnn/depthwise",
    "cnn/noop",
    "cnn/norm",
)
TRANSFORMER_BLUEPRINTS = (
    "transformer/attention",
    "transformer/lora",
    "transformer/lora_large",
    "transformer/mlp",
    "transformer/mlp_small",
    "transformer/noop",
    "transformer/norm",
)


def _pin(blueprints: Sequence[str]) -> str:
    return "env.blueprints=[" + ", ".join(f'"{b}"' for b in blueprints) + "]"


# id -> the --set overrides that define it (on top of any the caller passes to make()).
REGISTERED: dict[str, tuple[str, ...]] = {
    # Pinned to the base preset: the digits default became `impaired` (the host where the
    # default controller's growth pays), and a "-v0" id must keep meaning one env.
    "esper/Digits-v0": ('run.task="digits"', 'tasks.digits.preset="base"', _pin(CNN_BLUEPRINTS)),
    "esper/DigitsImpaired-v0": (
        'run.task="digits"',
        'tasks.digits.preset="impaired"',
        _pin(CNN_BLUEPRINTS),
    ),
    "esper/Glyphs-v0": ('run.task="glyphs"', _pin(CNN_BLUEPRINTS)),
    "esper/CIFAR10-v0": ('run.task="cifar10"', _pin(CNN_BLUEPRINTS)),
    "esper/CharLM-v0": ('run.task="charlm"', _pin(TRANSFORMER_BLUEPRINTS)),
}


def make_env(
    config: RunConfig | None = None, pm: Any = None, env_index: int = 0
) -> MorphogeneticEnv:
    """Build one env from a config through the plugin registries; the process gets the
    config's torch thread count (``run.threads``, 1 by default), as ``esper run`` does."""
    import torch

    from esper_core.plugins import PluginManager
    from esper_core.run.resolve import resolve

    config = config or RunConfig()
    resolved = resolve(config, pm or PluginManager())
    cfg = resolved.config
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    return MorphogeneticEnv(
        resolved.make_task(quiet=True),
        resolved.make_reward(),
        resolved.blueprints,
        cfg,
        env_index,
        cfg.run.device,
        operators=resolved.operators,
    )


def head_masks(masks: ActionMasks) -> tuple[np.ndarray, ...]:
    """One boolean mask per head, in :data:`HEADS` order (the unions described above)."""
    acting = masks.slot[[op for op in LifecycleOp if op != LifecycleOp.WAIT]]
    slot = acting.any(dim=0)
    alpha = masks.alpha_target.any(dim=0)
    blueprint = masks.blueprint.any(dim=0)
    heads = (masks.op, slot, blueprint, masks.style, masks.tempo, alpha)
    out = []
    for mask in heads:
        array = mask.numpy().astype(bool)
        if array.size == 0:
            array = np.ones(1, dtype=bool)  # an empty head is one dummy choice
        elif not array.any():
            array = np.ones_like(array)  # nothing legal: no legal op reads this head
        out.append(array)
    return tuple(out)


class EsperGymEnv(gym.Env[np.ndarray, np.ndarray]):
    """One Esper env as a Gymnasium env: one step is one host epoch.

    ``overrides`` are ``--set`` values (``"env.max_epochs=10"``) applied to ``config`` (or
    to the defaults), as ``gymnasium.make("esper/Digits-v0", overrides=[...])`` passes them;
    a registered id's own settings come first, as ``defining``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        env: MorphogeneticEnv | None = None,
        config: RunConfig | None = None,
        pm: Any = None,
        overrides: Sequence[str] = (),
        defining: Sequence[str] = (),
    ) -> None:
        super().__init__()
        overrides = [*defining, *overrides]
        if env is None:
            if overrides:
                from esper_core.config import config_to_dict

                base = config_to_dict(config) if config is not None else {}
                base.pop("schema_version", None)
                config = load_config(extra=base, overrides=list(overrides))
            env = make_env(config, pm)
        self.env = env
        space = self.env.space
        self.history_length = self.env.config.env.history_length
        dim = feature_dim(space, self.history_length)
        self.observation_space = spaces.Box(low=-10.0, high=10.0, shape=(dim,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete([max(1, space.head_sizes[h]) for h in HEADS])
        self._seed = self.env.seed
        self._masks: tuple[np.ndarray, ...] | None = None
        self._episodes = 0  # resets so far
        self._segment_cut = False  # the last step rolled back mid-run

    def _encode(self, obs: Observation) -> np.ndarray:
        return np.asarray(features(obs, self.env.space, self.history_length), dtype=np.float32)

    def _info(self, obs: Observation, **extra: Any) -> dict[str, Any]:
        self._masks = head_masks(obs.masks)
        return {"action_mask": self._masks, "masks": obs.masks, "observation": obs, **extra}

    def action_masks(self) -> np.ndarray:
        """The legal choices of every head, concatenated in head order (``MaskablePPO``)."""
        if self._masks is None:
            raise RuntimeError("call reset() before action_masks()")
        return np.concatenate(self._masks)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """A new episode: with ``seed``, a host and data order from that seed; without one,
        the next seed after the previous episode's, so successive episodes differ."""
        if seed is not None and not (
            isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED
        ):
            # Checked before anything changes: a seed of 2**70 was kept, then overflowed in
            # torch, and every later reset() failed the same way.
            raise ValueError(f"reset(seed=...) takes an integer in [0, {MAX_SEED}], got {seed!r}")
        super().reset(seed=seed)
        if seed is None and self._segment_cut:
            # A governor rollback ended the segment, not the training run: the run goes on
            # from the restored snapshot as a new segment, as it does in Esper's own PPO.
            self._segment_cut = False
            obs = self.env.observation
            return self._encode(obs), self._info(obs, continued_after_rollback=True)
        self._segment_cut = False
        if seed is not None:
            self._seed = seed
        elif self._episodes:
            self._seed += 1
        self._episodes += 1
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
        # terminal bonus is paid), so it is `terminated`, not a time-limit truncation. A
        # governor rollback is terminal too, as in Esper's own PPO (no bootstrap across the
        # restored snapshot); the next reset() without a seed continues the same run.
        self._segment_cut = bool(result.rolled_back and not result.done)
        return self._encode(obs), float(result.reward), bool(result.terminal), False, info


def register_envs() -> None:
    """Register every id of :data:`REGISTERED` with gymnasium (idempotent)."""
    for env_id, overrides in REGISTERED.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="esper_core.env.gym:EsperGymEnv",
            kwargs={"defining": overrides},
            # The env ends every episode itself (terminated at max_epochs): no TimeLimit.
            disable_env_checker=True,
        )


register_envs()
