"""Shared pieces of the executor tests: tiny envs, a scripted driver, comparable results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs

from tests.fake_plugin import ScriptedPolicy, ScriptOptions
from tests.fakes import BLUEPRINTS, AccuracyDeltaReward, TinyTask

FAKE_PLUGIN = str(Path(__file__).parents[2] / "fake_plugin.py")
TINY = ["lifecycle.min_training_epochs=2", "env.max_epochs=6"]


def make_config(*overrides: str) -> Any:
    from esper_core.config import load_config

    return load_config(overrides=[*TINY, *overrides])


def make_envs(config: Any, devices: Sequence[Any], seed: int = 0) -> list[Any]:
    """One env per device on the tiny task, reset like the runner does (seed + index)."""
    from esper_core.env.env import MorphogeneticEnv

    task = TinyTask()
    envs = [
        MorphogeneticEnv(task, AccuracyDeltaReward(), BLUEPRINTS, config, i, device)
        for i, device in enumerate(devices)
    ]
    for i, env in enumerate(envs):
        env.reset(seed + i)
    return envs


def drive(executor: Any, envs: Sequence[Any], epochs: int) -> list[list[Any]]:
    """Step ``envs`` under the scripted policy (it germinates, so seeds train)."""
    policy = ScriptedPolicy(ScriptOptions(seed=0), SimpleNamespace(space=envs[0].space))
    observations = [env.observation for env in envs]
    steps = []
    for _ in range(epochs):
        results = executor.step(envs, policy.act(observations))
        steps.append(results)
        observations = [r.observation for r in results]
    return steps


def without_time(result: Any) -> Any:
    """A StepResult with its wall-clock numbers zeroed (all else must match bit for bit)."""

    def clean(event: Any) -> Any:
        changes = {name: 0.0 for name in ("time", "epoch_time") if hasattr(event, name)}
        return attrs.evolve(event, **changes)

    return attrs.evolve(
        result,
        metrics=attrs.evolve(result.metrics, epoch_time=0.0),
        events=[clean(e) for e in result.events],
    )


def params_of(env: Any) -> dict[str, Any]:
    tensors = [*env.model.named_parameters(), *env.model.named_buffers()]
    return {name: t.detach().clone() for name, t in tensors}
