"""``esper``: the root click group and the entry point."""

from __future__ import annotations

import copy
import sys

import click

from esper_cli import commands
from esper_cli.boundary import EsperGroup, report
from esper_cli.context import set_debug
from esper_core import __version__
from esper_core.plugins import PluginManager


@click.group(cls=EsperGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="esper")
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=set_debug,
    help="Show full tracebacks instead of one-line errors.",
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Esper: grow neural networks while they train.

    A host network trains on a task; Tamiyo (a heuristic or a learned PPO policy)
    germinates seed modules into its slots, blends them in, and keeps or prunes them.
    """
    ctx.ensure_object(dict)


for _command in commands.COMMANDS:
    cli.add_command(_command)


def build_cli(pm: PluginManager | None = None) -> tuple[click.Group, PluginManager]:
    """The group with the core commands and those the plugins of ``pm`` contribute
    (default: a plugin manager that discovers every installed plugin)."""
    pm = PluginManager() if pm is None else pm
    group = copy.copy(cli)
    group.commands = dict(cli.commands)  # plugin commands belong to this group, not the module's
    pm.add_commands(group)
    return group, pm


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        group, pm = build_cli()
    except Exception as exc:
        # Loading plugins precedes parsing: no click context holds --debug yet.
        code = report(exc, debug="--debug" in args)
        if code is None:
            raise
        sys.exit(code)
    group.main(args=args, prog_name="esper", obj={"pm": pm})
