"""Options shared by the commands that start runs, and the config they build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import click

from esper_core.command_types import PathArg
from esper_core.config import RunConfig, load_config
from esper_core.plugins import PluginManager, split_selections

F = Callable[..., Any]

_SELECTION_FIELD = {
    "tasks": "task",
    "rewards": "reward",
    "policies": "policy",
    "executors": "executor",
}


def config_options(fn: F) -> F:
    """--config, --set, --plugin and the convenience flags, in one decorator."""
    decorators = [
        click.option(
            "--config",
            "config_path",
            type=PathArg(dir_okay=False),
            help="TOML or JSON config file.",
        ),
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="SECTION.KEY=VALUE",
            help="Override one config value.",
        ),
        click.option(
            "--plugin",
            "plugins",
            multiple=True,
            metavar="KIND.NAME|MODULE|FILE.py",
            help="Select a component (rewards.pbrs) or load a plugin module or file; repeatable.",
        ),
        click.option("--task", help="Task component, e.g. digits."),
        click.option(
            "--policy", help="Policy, e.g. heuristic, random, wait, ppo:DIR/checkpoint.pt."
        ),
        click.option("--reward", help="Reward family, e.g. pbrs."),
        click.option("--executor", help="Executor, e.g. serial, streams."),
        click.option("--telemetry", multiple=True, help="Add a telemetry backend (repeatable)."),
        click.option("--seed", type=int, help="Base random seed (env i uses random seed + i)."),
        click.option("--device", help="Device, e.g. cpu or cuda:0."),
        click.option(
            "--devices", multiple=True, help="Devices for envs round-robin (streams executor)."
        ),
        click.option("--envs", "n_envs", type=int, help="Number of parallel environments."),
        click.option("--max-epochs", type=int, help="Epochs per episode (default: the task's)."),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def build_config(
    pm: PluginManager, params: dict[str, Any], extra_run: dict[str, Any] | None = None
) -> RunConfig:
    """Config file <- convenience flags and ``--plugin KIND.NAME`` <- ``--set``."""
    loads, selections = split_selections(params.get("plugins") or ())
    pm.extend(loads)
    run: dict[str, Any] = dict(extra_run or {})
    for kind, field_name in _SELECTION_FIELD.items():
        if kind in selections:
            run[field_name] = selections[kind][-1]
    for flag in ("task", "policy", "reward", "executor", "seed", "device", "n_envs"):
        if params.get(flag) is not None:
            run[flag] = params[flag]
    if params.get("devices"):
        run["devices"] = list(params["devices"])
    extra: dict[str, Any] = {"run": run}
    if params.get("max_epochs") is not None:
        extra["env"] = {"max_epochs": params["max_epochs"]}
    config = load_config(params.get("config_path"), list(params.get("sets") or ()), extra)
    added = list(selections.get("telemetry", [])) + list(params.get("telemetry") or ())
    if added:
        telemetry = list(dict.fromkeys([*config.run.telemetry, *added]))
        config = attrs.evolve(config, run=attrs.evolve(config.run, telemetry=telemetry))
    return config
