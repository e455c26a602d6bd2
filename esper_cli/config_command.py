"""``esper config show``: the fully resolved config as TOML (``--all``: every key)."""

from __future__ import annotations

from typing import Any

import click

from esper_cli.context import plugin_manager
from esper_cli.options import build_config, config_options


@click.group()
def config() -> None:
    """Inspect configuration."""


@config.command("show")
@config_options
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every key, unset ones too, with its default and description (see docs/configuration.md).",
)
@click.pass_context
def config_show(ctx: click.Context, show_all: bool, **params: Any) -> None:
    """Print the fully resolved config (defaults and component options filled in) as TOML."""
    from esper_core.config import dump_toml
    from esper_core.run.resolve import resolve

    pm = plugin_manager(ctx)
    resolved = resolve(build_config(pm, params), pm)
    if not show_all:
        click.echo(dump_toml(resolved.config), nl=False)
        return
    from esper_core.config_docs import annotated_toml

    run = resolved.config.run
    components = {
        f"tasks.{run.task}": resolved.task.options,
        f"rewards.{run.reward}": resolved.reward.options,
        f"policies.{resolved.policy_ref.name}": resolved.policy.options,
        f"executors.{run.executor}": resolved.executor.options,
        **{
            f"telemetry.{name}": c.options
            for name, c in zip(dict.fromkeys(run.telemetry), resolved.telemetry)
        },
    }
    click.echo(annotated_toml(resolved.config, components))
