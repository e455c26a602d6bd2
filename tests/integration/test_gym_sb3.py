"""The registered Gymnasium env trains under Stable-Baselines3's PPO and sb3-contrib's
MaskablePPO, straight from ``gymnasium.make`` (no wrapper of ours)."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
sb3 = pytest.importorskip("stable_baselines3")
sb3_contrib = pytest.importorskip("sb3_contrib")

import esper_core.env.gym as esper_gym  # noqa: E402  (registers the esper/* ids)
from tests.plugin_set import plugin_manager  # noqa: E402

# Short episodes of few batches, validated on a tenth of the images: each step is cheap.
SMALL = [
    "env.max_epochs=5",
    "env.max_batches=2",
    "env.eval_test_every=0",
    "tasks.digits.val_fraction=0.1",
]
# Two rollouts of n_steps=50 and the update after each: learn's whole cycle, twice.
STEPS = 100


def _make() -> gymnasium.Env:
    # Autoloading is off in tests: the first-party plugins are passed in (a user's
    # gymnasium.make("esper/Digits-v0") finds the installed ones itself).
    return gymnasium.make("esper/Digits-v0", overrides=SMALL, pm=plugin_manager())


def test_the_documented_module_form_makes_an_env_in_a_fresh_interpreter() -> None:
    """docs/gym.md: Gymnasium 1.x loads no plugins, so the bare id needs the import first
    and ``esper_core.env.gym:esper/Digits-v0`` does the import itself."""
    import subprocess
    import sys

    from tests.plugin_set import REPO, subprocess_env

    script = f"""
import gymnasium
from tests.plugin_set import plugin_manager
try:
    gymnasium.make("esper/Digits-v0")
except gymnasium.error.NamespaceNotFound as exc:
    print("bare:", exc)
env = gymnasium.make("esper_core.env.gym:esper/Digits-v0", overrides={SMALL!r}, pm=plugin_manager())
print("made:", type(env.unwrapped).__name__)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, cwd=REPO, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "bare: Namespace esper not found" in result.stdout
    assert "made: EsperGymEnv" in result.stdout


def test_every_id_is_registered_with_a_spec() -> None:
    for env_id in (
        "esper/Digits-v0",
        "esper/DigitsImpaired-v0",
        "esper/Glyphs-v0",
        "esper/CIFAR10-v0",
        "esper/CharLM-v0",
    ):
        spec = gymnasium.spec(env_id)
        assert spec.entry_point == "esper_core.env.gym:EsperGymEnv"
        assert any(s.startswith("env.blueprints=") for s in spec.kwargs["defining"])
    env = gymnasium.make(
        "esper_core.env.gym:esper/DigitsImpaired-v0", overrides=SMALL, pm=plugin_manager()
    )
    assert env.unwrapped.env.config.tasks["digits"]["preset"] == "impaired"
    # Digits-v0 keeps its base host although the task's default preset is now impaired.
    base = gymnasium.make("esper/Digits-v0", overrides=SMALL, pm=plugin_manager())
    assert base.unwrapped.env.config.tasks["digits"]["preset"] == "base"
    glyphs = gymnasium.spec("esper/Glyphs-v0").kwargs["defining"]
    assert 'run.task="glyphs"' in glyphs
    # The pinned blueprint set: third-party blueprints installed here do not join the space.
    assert env.unwrapped.env.space.blueprints == esper_gym.CNN_BLUEPRINTS


def test_action_masks_are_the_heads_concatenated() -> None:
    env = _make()
    env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    sizes = list(env.action_space.nvec)
    assert masks.dtype == bool and masks.shape == (sum(sizes),)
    op = masks[: sizes[0]]
    assert op.tolist() == [True, True, False, False, False, False]  # WAIT or GERMINATE
    # Every head keeps at least one legal choice (a head with none would give NaN logits).
    start = 0
    for size in sizes:
        assert masks[start : start + size].any()
        start += size


@pytest.mark.slow
def test_sb3_ppo_trains_on_the_registered_env() -> None:
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", _make(), n_steps=50, batch_size=50, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=STEPS)
    assert model.num_timesteps >= STEPS


@pytest.mark.slow
def test_maskable_ppo_trains_without_a_wrapper_and_respects_the_op_mask() -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    env = _make()
    model = MaskablePPO(
        "MlpPolicy", env, n_steps=50, batch_size=50, n_epochs=1, seed=0, device="cpu"
    )
    model.learn(total_timesteps=STEPS)
    assert model.num_timesteps >= STEPS
    obs, _ = env.reset(seed=3)
    n_ops = int(env.action_space.nvec[0])
    for _ in range(5):
        masks = get_action_masks(env)
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert masks[:n_ops][int(np.asarray(action)[0])], "a masked-out op was chosen"
        obs, _, terminated, _, _ = env.step(action)
        if terminated:
            obs, _ = env.reset()
