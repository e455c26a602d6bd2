"""Click parameter types for commands, the core's and those a plugin adds through
``esper_register_commands(cli)``.

They live in the core, not in ``esper_cli``, because a plugin may depend on the core
alone (the layers are core <- plugins and core <- cli): a plugin's command that needs the
CLI's path checks takes them from here.
"""

from __future__ import annotations

from typing import Any

import click


class PathArg(click.Path):
    """``click.Path`` that refuses a NUL byte as a usage error: the operating system cannot
    take one, and ``os.stat`` would raise ValueError instead of naming the option."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\0" in value:
            self.fail(f"{value!r} contains a NUL byte", param, ctx)
        return super().convert(value, param, ctx)
