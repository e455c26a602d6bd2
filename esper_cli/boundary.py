"""The one place where an exception becomes what the user sees.

Every command runs inside :class:`EsperGroup`, so every failure passes through
:func:`report`:

- a usage error click finds (unknown option, bad value): one line, exit 2;
- :class:`~esper_core.run.interrupts.Interrupted` (Ctrl-C, checkpoint written): its advice, exit 130;
- any other :class:`~esper_core.errors.EsperError` (an error the user can fix): one line, exit 2;
- out-of-memory, a dead data worker, a full disk or an exception raised in a plugin's
  code: one line naming the cause and the last checkpoint
  (:func:`esper_core.run.failures.explain`), exit 2;
- anything else is a bug: the traceback.

``--debug`` (kept in the click context) shows the traceback in every case.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from attrs import frozen

from esper_cli.context import RunTarget, debug_enabled, loaded_plugin_manager, run_target
from esper_core.errors import EsperError
from esper_core.plugins import PluginManager
from esper_core.run.failures import explain, plugin_modules
from esper_core.run.interrupts import Interrupted

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


@frozen
class Shown:
    """One line for stderr and the exit code."""

    message: str
    code: int


def one_line(text: str) -> str:
    return " ".join(text.split())


def shown(
    exc: BaseException, pm: PluginManager | None = None, target: RunTarget | None = None
) -> Shown | None:
    """What the user sees for ``exc``, or None for a bug, whose traceback they need."""
    if isinstance(exc, Interrupted):
        return Shown(one_line(str(exc)), EXIT_INTERRUPTED)
    if isinstance(exc, EsperError):
        return Shown(f"error: {one_line(str(exc))}", EXIT_USER_ERROR)
    if not isinstance(exc, Exception):
        return None
    explained = explain(
        exc,
        plugin_modules(pm) if pm is not None else {},
        target.run_dir if target is not None else None,
        target.mode if target is not None else "run",
    )
    if explained is None:
        return None
    return Shown(f"error: {one_line(str(explained))}", EXIT_USER_ERROR)


def report(
    exc: BaseException,
    debug: bool,
    pm: PluginManager | None = None,
    target: RunTarget | None = None,
) -> int | None:
    """Print the line for ``exc`` and return the exit code; None: re-raise it (traceback)."""
    if debug:
        return None
    result = shown(exc, pm, target)
    if result is None:
        return None
    click.echo(result.message, err=True)
    return result.code


class EsperGroup(click.Group):
    """The root group: every command's failure ends here."""

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
            click.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
            sys.exit(EXIT_USER_ERROR)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(EXIT_INTERRUPTED)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            code = report(exc, debug_enabled(ctx), loaded_plugin_manager(ctx), run_target(ctx))
            if code is None:
                raise
            ctx.exit(code)
