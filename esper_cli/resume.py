"""The config of ``esper run|train --resume DIR``: the one the run started with.

A resumed run must be the run that wrote its checkpoint, so flags that would change its
config are refused, by name, instead of being ignored. The length of an ``esper run`` is
the exception: ``--episodes`` lengthens it (or ends it earlier), and the library records
the new length in the run's config.toml. ``esper train --updates`` is refused: the
policy's schedules span the planned updates (see :mod:`esper_core.run.resume_check`).

``--plugin KIND.NAME`` is refused only when it would select another component than the
run's: one naming the run's own task, reward, policy, executor or a telemetry backend of
it (or a kind a config does not select, such as blueprints) only loads its entry point.
With autoloading off that is how a resumed run, and every rank of ``--nproc``, finds the
plugins the run was started with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from esper_core.config import RunConfig, load_config
from esper_core.errors import ConfigError
from esper_core.plugins import split_selections
from esper_core.run.policy_ref import PolicyRef
from esper_core.run.run_dir import CONFIG, load_run_config

# Parameter -> the flag that sets it, for every flag that would change a run's config.
CONFIG_FLAGS = {
    "config_path": "--config",
    "sets": "--set",
    "task": "--task",
    "policy": "--policy",
    "reward": "--reward",
    "executor": "--executor",
    "telemetry": "--telemetry",
    "seed": "--seed",
    "device": "--device",
    "devices": "--devices",
    "n_envs": "--envs",
    "max_epochs": "--max-epochs",
    "out": "--out",
    "updates": "--updates",
}


def resumed_config(
    run_dir: Path, params: dict[str, Any], mode: str, notify: Callable[[str], None]
) -> RunConfig:
    """The config of the run in ``run_dir``, with its length changed if --episodes asks
    (which ``notify`` announces)."""
    refused = [flag for key, flag in CONFIG_FLAGS.items() if params.get(key) not in (None, (), [])]
    selections = split_selections(params.get("plugins") or ())[1]
    if selections:
        refused += changed_selections(load_run_config(run_dir), selections)
    if refused:
        may = (
            "only --episodes may change, to lengthen the run"
            if mode == "run"
            else ("nothing may change (a trainable policy's schedules span its planned updates)")
        )
        raise ConfigError(
            [
                f"{', '.join(refused)} cannot be used with --resume: a resumed run keeps the "
                f"config it started with ({run_dir / CONFIG}); {may}"
            ]
        )
    config = load_run_config(run_dir)
    wanted = params.get("episodes")
    if wanted is None or int(wanted) == config.run.episodes:
        return config
    longer = load_config(run_dir / CONFIG, [f"run.episodes={int(wanted)}"])
    notify(f"Resuming with run.episodes {config.run.episodes} -> {longer.run.episodes}.")
    return longer


def changed_selections(config: RunConfig, selections: dict[str, list[str]]) -> list[str]:
    """The ``--plugin KIND.NAME`` values that select a component other than ``config``'s."""
    run = config.run
    chosen = {
        "tasks": {run.task},
        "rewards": {run.reward},
        "policies": {PolicyRef.parse(run.policy).name},
        "executors": {run.executor},
        "telemetry": set(run.telemetry),
    }
    return [
        f"--plugin {kind}.{name}"
        for kind, names in selections.items()
        for name in names
        if kind in chosen and name not in chosen[kind]
    ]
