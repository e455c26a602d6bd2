"""``esper``: the click group, its error handling and the core commands."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from esper_core import __version__
from esper_core.errors import EsperError
from esper_core.plugins import PluginManager

DEBUG_ENV = "ESPER_DEBUG"


class EsperGroup(click.Group):
    """Turns every error a user can cause into one line on stderr and exit code 2."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            # Without standalone mode click returns the code of ctx.exit() instead of exiting.
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.exit(code if isinstance(code, int) else 0)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            hint = ""
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                hint = f" (see: {exc.ctx.command_path} --help)"
            message = " ".join(exc.format_message().split())
            click.echo(f"error: {message}{hint}", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EsperError as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                raise
            from esper_core.run.interrupts import Interrupted

            message = " ".join(str(exc).split())  # one line, whatever the message holds
            click.echo(message if isinstance(exc, Interrupted) else f"error: {message}", err=True)
            ctx.exit(130 if isinstance(exc, Interrupted) else 2)


def _debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        os.environ[DEBUG_ENV] = "1"


@click.group(cls=EsperGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="esper")
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_debug,
    help="Show full tracebacks instead of one-line errors.",
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Esper: grow neural networks while they train.

    A host network trains on a task; Tamiyo (a heuristic or a learned PPO policy)
    germinates seed modules into its slots, blends them in, and keeps or prunes them.
    """
    ctx.ensure_object(dict)


def plugin_manager(ctx: click.Context) -> PluginManager:
    """The process's plugin manager (built once; --plugin values extend it)."""
    root = ctx.find_root()
    if not isinstance(root.obj, dict):
        root.obj = {}
    if "pm" not in root.obj:
        root.obj["pm"] = PluginManager()
    pm: PluginManager = root.obj["pm"]
    return pm


def build_cli() -> tuple[click.Group, PluginManager]:
    """The group with core commands and those plugins contribute."""
    from esper_cli import commands

    for command in commands.COMMANDS:
        cli.add_command(command)
    pm = PluginManager()
    pm.add_commands(cli)
    return cli, pm


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        group, pm = build_cli()
    except EsperError as exc:
        if "--debug" in args or os.environ.get(DEBUG_ENV) == "1":
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    group.main(args=args, prog_name="esper", obj={"pm": pm})


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def path_arg(value: str | None) -> Path | None:
    return Path(value) if value else None
