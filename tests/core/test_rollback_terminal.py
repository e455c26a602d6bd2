"""One terminal rule: a governor rollback ends the episode segment in Esper's own PPO and
in the Gymnasium adapter alike, and in both the training run goes on from the snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from esper_core.env.env import MorphogeneticEnv
from esper_core.env.step import StepResult
from esper_core.lifecycle.actions import WAIT
from tests.fakes import make_env

gymnasium = pytest.importorskip("gymnasium")
from esper_core.env.gym import EsperGymEnv  # noqa: E402


def _rollback_step(env: MorphogeneticEnv, step: Any) -> Any:
    """One step with a NaN training loss: the governor panics and rolls back."""
    task_loss = env.task.loss
    env.task.loss = lambda out, y: task_loss(out, y) * float("nan")  # type: ignore[method-assign]
    try:
        return step()
    finally:
        env.task.loss = task_loss  # type: ignore[method-assign]


def test_the_in_house_step_result_marks_a_rollback_terminal_but_not_done() -> None:
    env = make_env("env.max_epochs=8")
    env.step(WAIT)
    result: StepResult = _rollback_step(env, lambda: env.step(WAIT))
    assert result.rolled_back and result.terminal and not result.done


def test_the_gym_adapter_terminates_at_a_rollback_and_reset_continues_the_run() -> None:
    inner = make_env("env.max_epochs=8")
    env = EsperGymEnv(env=inner)
    env.reset(seed=3)
    env.step([0] * 6)
    epoch = inner.epoch
    _, reward, terminated, truncated, info = _rollback_step(inner, lambda: env.step([0] * 6))
    assert info["rolled_back"] and terminated and not truncated
    assert reward <= inner.config.governor.penalty + 1.0
    # reset() without a seed: the same run, from the restored snapshot, one epoch on.
    _, info = env.reset()
    assert info["continued_after_rollback"] and inner.epoch == epoch + 1
    _, _, terminated, _, info = env.step([0] * 6)
    assert not terminated and not info["rolled_back"] and inner.epoch == epoch + 2
    # With a seed, or after the run's last epoch, reset() starts a new run.
    env.reset(seed=3)
    assert inner.epoch == 0


def test_the_gym_adapter_and_the_in_house_env_agree_on_every_step() -> None:
    """The same seed, the same actions, a rollback at epoch 3: `terminated` is the
    StepResult's `terminal` on every step (what Esper's PPO cuts its segments on)."""
    direct = make_env("env.max_epochs=6")
    direct.reset(5)
    wrapped_inner = make_env("env.max_epochs=6")
    wrapped = EsperGymEnv(env=wrapped_inner)
    wrapped.reset(seed=5)
    for epoch in range(6):
        if epoch == 3:
            a: StepResult = _rollback_step(direct, lambda: direct.step(WAIT))
            b = _rollback_step(wrapped_inner, lambda: wrapped.step([0] * 6))
            wrapped.reset()
        else:
            a = direct.step(WAIT)
            b = wrapped.step([0] * 6)
        assert b[2] == a.terminal and b[4]["rolled_back"] == a.rolled_back, epoch
        assert b[1] == pytest.approx(a.reward), epoch
    assert a.done and b[2]
